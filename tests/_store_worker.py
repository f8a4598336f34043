"""One process of tests/test_jax_store.py: what nkserde.processes.jax_service.JaxStore
relies on of JAX's coordination service (errors of an existing key, a
missing key, timeouts; dir_get and delete of a prefix; a key put again). Needs JAX and
nkserde only, so it runs under every NetKet CI installs.

    python _store_worker.py RANK N PORT store WORKDIR

writes WORKDIR/rank-<r>.json: what this process saw.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

rank, n_processes, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
workdir = Path(sys.argv[5])

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=n_processes, process_id=rank, initialization_timeout=120
)

from nkserde.processes.coordination import KeyExists, StoreTimeout  # noqa: E402
from nkserde.processes.jax_service import JaxStore  # noqa: E402
from nkserde.jax_internals import distributed_client  # noqa: E402


def store_semantics():
    store, seen = JaxStore(distributed_client()), {}
    store.set(f"t/d/{rank}", b"value %d" % rank)
    store.barrier("t/b1", 30)
    seen["dir"] = [[k, v.decode()] for k, v in store.dir_get("t/d")]
    seen["missing"] = store.try_get("t/none") is None
    seen["present"] = store.try_get("t/d/0") == b"value 0"
    store.put(f"t/p/{rank}", b"1")  # a heartbeat: put again, whatever it holds
    store.put(f"t/p/{rank}", b"2")
    seen["put_again"] = store.try_get(f"t/p/{rank}") == b"2"
    try:
        store.set(f"t/d/{rank}", b"again")
        seen["exists"] = False
    except KeyExists:
        seen["exists"] = True
    store.barrier("t/b2", 30)
    if rank == 0:
        store.delete("t/d")
        seen["after_delete"] = store.dir_get("t/d") == [] and store.try_get("t/d/1") is None
        start = time.monotonic()
        try:
            store.get("t/never", 0.5)
            seen["get_timeout"] = False
        except StoreTimeout:
            seen["get_timeout"] = 0.4 < time.monotonic() - start < 10
        try:  # process 1 comes late
            store.barrier("t/late", 0.5)
            seen["barrier_timeout"] = False
        except StoreTimeout:
            seen["barrier_timeout"] = True
    else:
        time.sleep(4)  # after process 0 gave up on the barrier
        try:
            store.barrier("t/late", 0.5)
            seen["late_arrival"] = False
        except StoreTimeout:
            seen["late_arrival"] = True
    store.barrier("t/end", 30)
    (workdir / f"rank-{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    store_semantics()
