"""A process of tests/test_peer_watch.py: process 1 of 2, whose watch
listens for the test's process (0) over a store of files, then does what
it is told while the test's watch listens for it:

    python _peer_process.py STORE_DIR HOST LOST_AFTER BEHAVIOUR SECONDS

BEHAVIOUR: ``hold`` (a C call holds the interpreter for SECONDS: no
thread of this process runs Python), ``sleep`` (the main thread sleeps,
as one waiting in a collective or a compile), ``wait`` (nothing: the test
stops it, kills it or cuts its network). Prints ``connected`` once its
watch has reached the test's, ``done`` when the behaviour is over, then
ends its run through Python (the watch's word ``end``) unless told
``wait``.
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from file_store import FileStore
from nkserde.processes.peer_watch import PeerWatch

directory, host, lost_after, behaviour, seconds = sys.argv[1:6]
said = lambda peer, why, host: print("lost", peer, why, flush=True)  # noqa: E731
watch = PeerWatch(FileStore(Path(directory)), "peers", 1, 2, said, host=host, lost_after=float(lost_after)).start()
watch.connected.wait(60)
print("connected", flush=True)
if behaviour == "hold":
    ctypes.PyDLL(None).sleep(round(float(seconds)))  # libc's sleep through a PyDLL: the GIL stays held
elif behaviour == "sleep":
    time.sleep(float(seconds))
else:
    time.sleep(3600)
print("done", flush=True)
watch.close()
