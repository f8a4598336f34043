"""How long the ``nkserde`` command takes to answer, side by side with what
reading a header needs: a bare interpreter that imports the header reader's
own dependencies.

    python benchmarks/cli_inspect.py [--rounds 7] [--gb 0]

Writes a Checkpoint directory of an 8-site RBM VMC run (three checkpoints of
a few KB), then times, in alternating rounds (median wall clock and CPU of
each command as a subprocess):

* the baseline, ``python -c "import numpy, msgpack, zstandard, xxhash, rich"``;
* ``nkserde inspect FILE``, ``nkserde ls DIR``, ``nkserde verify FILE``,
  ``nkserde migrate --dry-run FILE`` (none imports JAX or NetKet);
* for scale, ``python -c "import nkserde; nkserde.save"``: the library's API
  with JAX and NetKet, which every command imported before.

and prints each as a ratio to the baseline. With ``--gb G`` it also writes
a file of G GB and times ``inspect`` on it (the header only: the time does
not grow with the file) and ``verify`` (reads every byte).
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

SCRIPT = Path(sys.executable).with_name("nkserde")
BASELINE = [sys.executable, "-c", "import numpy, msgpack, zstandard, xxhash, rich"]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of ``command``."""
    c0, t0 = children_cpu(), time.perf_counter()
    subprocess.run([str(a) for a in command], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, children_cpu() - c0


def checkpoint_directory(root: Path) -> Path:
    import netket as nk

    import nkserde

    hilbert = nk.hilbert.Spin(0.5, 8)
    graph = nk.graph.Chain(8)
    vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert), nk.models.RBM(alpha=1), n_samples=64, seed=0)
    driver = nk.driver.VMC(nk.operator.Ising(hilbert, graph, h=1.0), nk.optimizer.Sgd(0.01), variational_state=vs)
    directory = root / "ckpt"
    driver.run(6, out=nk.logging.RuntimeLog(), show_progress=False, callback=nkserde.Checkpoint(directory, every=2))
    return directory


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gb", type=float, default=0.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        directory = checkpoint_directory(root)
        newest = sorted(directory.glob("step-*.nks"))[-1]
        commands = {
            "baseline: import numpy, msgpack, zstandard, xxhash, rich": BASELINE,
            "nkserde inspect FILE": [SCRIPT, "inspect", newest],
            "nkserde ls DIR": [SCRIPT, "ls", directory],
            "nkserde verify FILE": [SCRIPT, "verify", newest],
            "nkserde migrate --dry-run FILE": [SCRIPT, "migrate", "--dry-run", newest],
            "python -c 'import nkserde; nkserde.save' (the API)": [
                sys.executable,
                "-c",
                "import nkserde; nkserde.save",
            ],
        }
        times = {name: [] for name in commands}
        for _ in range(args.rounds):  # alternating: a load spike hits every command alike
            for name, command in commands.items():
                times[name].append(timed(command))
        print(
            f"{newest.name}: {newest.stat().st_size} bytes; {args.rounds} rounds, median; "
            f"ratio = wall / the baseline's wall"
        )
        base = statistics.median(w for w, _ in times[next(iter(times))])
        print(f"{'command':58s} {'wall s':>7s} {'CPU s':>7s} {'ratio':>6s}")
        for name, runs in times.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(f"{name:58s} {wall:7.3f} {cpu:7.3f} {wall / base:6.2f}")
        if args.gb:
            large(root, args.gb)


def large(root: Path, gb: float) -> None:
    import nkserde

    path = root / "large.nks"
    rng = np.random.default_rng(0)
    n_arrays = 16
    per_array = int(gb * 1e9 / 8 / n_arrays)
    nkserde.save({f"layer{i}": rng.standard_normal(per_array) for i in range(n_arrays)}, path)
    size = path.stat().st_size
    inspect = statistics.median(timed([SCRIPT, "inspect", path])[0] for _ in range(3))
    verify = timed([SCRIPT, "verify", path])[0]
    print(f"{path.name}: {size / 1e9:.2f} GB: nkserde inspect {inspect:.3f} s, nkserde verify {verify:.2f} s")


if __name__ == "__main__":
    main()
