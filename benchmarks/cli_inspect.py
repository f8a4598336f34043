"""How long ``nkserde inspect`` takes on a large file: it reads the header
only, so the time should not grow with the file.

    python benchmarks/cli_inspect.py [--gb 1.0] [--dir /tmp]

Writes a dict of float64 arrays of about ``--gb`` GB (random values: stored
raw, as parameters and optimizer moments are) with ``nkserde.save``, then
measures (median of 3, wall clock):

* ``nkserde inspect FILE --json`` as a subprocess (what a user waits for,
  Python and NetKet start-up included), next to ``python -c "import
  nkserde"`` (that start-up alone);
* ``nkserde.api.contents(FILE)`` in this process (the header read);
* ``nkserde verify FILE`` as a subprocess, for scale (reads every byte).

Subprocess times are given as wall clock and as their CPU time (user +
system): on a shared machine the first grows with the load, the second
hardly.

The file is deleted at the end.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import nkserde
from nkserde import api

SCRIPT = Path(sys.executable).with_name("nkserde")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall(fn, repeat=3) -> tuple[float, float]:
    """Median wall-clock seconds, and median CPU seconds of the
    subprocesses ``fn`` ran (a busy machine inflates the first only)."""
    times, cpu = [], []
    for _ in range(repeat):
        c0, t0 = children_cpu(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(children_cpu() - c0)
    return statistics.median(times), statistics.median(cpu)


def command(*args) -> None:
    subprocess.run([str(a) for a in args], check=True, stdout=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    path = args.dir / "nkserde-inspect-benchmark.nks"
    rng = np.random.default_rng(0)
    n_arrays = 16
    per_array = int(args.gb * 1e9 / 8 / n_arrays)
    state = {
        "parameters": {f"layer{i}": {"kernel": rng.standard_normal(per_array)} for i in range(n_arrays)},
        "step": 1000,
    }
    t0 = time.perf_counter()
    nkserde.save(state, path)
    del state
    size = path.stat().st_size
    print(f"file: {path} ({size / 1e9:.2f} GB, {n_arrays} arrays), saved in {time.perf_counter() - t0:.1f} s")
    try:
        startup = wall(lambda: command(sys.executable, "-c", "import nkserde"))
        inspect = wall(lambda: command(SCRIPT, "inspect", path, "--json"))
        header, _ = wall(lambda: api.contents(path), repeat=5)
        verify = wall(lambda: command(SCRIPT, "verify", path), repeat=1)
    finally:
        path.unlink()
    print(f"nkserde inspect FILE --json (subprocess): {inspect[0]:.2f} s wall, {inspect[1]:.2f} s CPU")
    print(f"  python -c 'import nkserde' (start-up):  {startup[0]:.2f} s wall, {startup[1]:.2f} s CPU")
    print(f"  api.contents(FILE) in process:          {header * 1e3:.2f} ms")
    print(
        f"nkserde verify FILE (subprocess):         {verify[0]:.2f} s wall, {verify[1]:.2f} s CPU "
        f"(reads {size / 1e9:.2f} GB)"
    )


if __name__ == "__main__":
    main()
