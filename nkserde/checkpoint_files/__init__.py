"""A checkpoint directory and a checkpoint file as they are on disk, read
from headers alone (no NetKet, no JAX: the command line uses them on a
login node); below the load (nkserde/loading/), which loads a directory's
newest checkpoint, and the ``checkpoint`` callback above it:

    directory.py      the directory: naming, the newest that verifies (resume_file: the
                      one rule), fingerprint.json, moving aside, retiring, the
                      history logs a checkpoint reaches back through
    lock.py           the directory's lock: one run at a time, stale locks taken over
    content.py        what a checkpoint file holds (its keys, how to tell one)

Imports: errors, _log, _warnings, format/.
"""
