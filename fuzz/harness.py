"""What the atheris harnesses share (fuzz/fuzz_reader.py,
fuzz/fuzz_netket_files.py): the checkout on sys.path, the load limits,
crash reports, the mix of byte and structure-aware mutations, the warm-up.

A crash is any exception other than ``nkserde.errors.NkserdeError`` (and
``FileNotFoundError``), a case slower than ``-timeout`` (10 s in fuzz/run:
a hang, not a first JAX compile), or memory beyond ``-rss_limit_mb``.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import tempfile
import traceback
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
# this checkout first (as pytest does), then the test helpers (scenarios.py)
sys.path[:0] = [str(HERE.parent), str(HERE), str(HERE.parent / "tests"), str(HERE.parent / "tests" / "fixtures")]

with atheris.instrument_imports(include=["nkserde"]):
    import nkserde

    nkserde.save

import targets  # noqa: E402

nkserde.set_load_limits(max_load_bytes=targets.MAX_LOAD_BYTES)
WORK = Path(tempfile.mkdtemp(prefix="nkserde-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
CRASHES = Path(os.environ.get("FUZZ_CRASHES", HERE / "crashes"))


def crash(data: bytes, name: str, exc: Exception):
    """Reports a crash and aborts: libFuzzer's SIGABRT handler writes the
    input to -artifact_prefix. (A Python exception would go through
    interpreter shutdown, where JAX's threads can outlast the timeout and
    lose the input; it is also saved here first.) Only the innermost frames
    are printed: a RecursionError's thousand would take too long."""
    trace = "".join(traceback.format_exception(exc, limit=-12))
    sys.stderr.write(f"\n=== nkserde.{name} raised {type(exc).__name__}, not an NkserdeError ===\n{trace[-6000:]}\n")
    CRASHES.mkdir(exist_ok=True)
    (CRASHES / f"crash-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
    sys.stderr.flush()
    os.abort()


def fuzz(read, mutate, corpus: Path, suffix: str) -> None:
    """Runs libFuzzer on ``read(path) -> None | (action, exception)``, each
    input written to a file named ``input{suffix}``; half of the mutations
    are ``mutate(data, rng)`` (None: fall back to byte mutations)."""
    path = WORK / f"input{suffix}"

    def one_input(data: bytes) -> None:
        path.write_bytes(data)
        found = read(path)
        if found is not None:
            crash(data, *found)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            out = mutate(data, rng)
            if out is not None and len(out) <= max_size:
                return out
        return atheris.Mutate(data, max_size)

    # warm up (JAX compiles what a load of each seed needs) before the clock
    for seed in sorted(corpus.iterdir()):
        one_input(seed.read_bytes())
    atheris.Setup(sys.argv, one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
