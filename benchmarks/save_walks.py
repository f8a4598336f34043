"""What the walks of a checkpoint's state cost, against the whole save.

    python benchmarks/save_walks.py [--models rbm-8,gcnn-16,mlp-100] [--repeat R] [--dir DIR]

A Checkpoint's save walks the state three times, each walk in its own layer:

* ``state_dict``: the registry's walk, objects -> a state dict
  (``nkserde.state_dict`` of the checkpoint's payload: driver, step,
  loggers, callbacks);
* ``host_copy``: for a background write only, a private copy of every
  numpy-backed array the run could change before the write reads it (JAX
  arrays are referenced);
* ``encode``: the format's walk, the state dict -> the header tree, the
  list of arrays to write and the stored types the metadata lists
  (``format.tree_codec.encode``), done by the background writer.

Measured beside them, in the same process, on the same state: ``save``,
a whole synchronous ``nkserde.save`` of the payload (the walks, checksums,
the write and fsync), and ``raw``, the same array bytes written to one file
and fsynced (the physical limit). Times are medians of ``--repeat`` (default
50) repeats; ``walks/save`` is the three walks' sum over ``save``.

Models (VMC, Adam: the optimizer state doubles the leaves twice over):

* ``rbm-8``: RBM alpha=1 on an 8-site Ising chain (80 parameters, 6 leaves
  with Adam's moments): where any fixed cost shows;
* ``gcnn-16``: the J1-J2 example's GCNN on a 16-site chain (4 layers of 8
  features);
* ``mlp-100``: an MLP of 100 hidden layers of width 8 on 16 sites (200
  parameter leaves, 600 with Adam's moments): the many-leaves case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax
import netket as nk
import numpy as np
import optax

import nkserde
from _environment import environment, parent_directory
from nkserde.saving.snapshot import private_copy as host_copy
from nkserde.checkpoint_files import content
from nkserde.format import tree_codec


def build(model: str):
    if model == "rbm-8":
        hilbert = nk.hilbert.Spin(0.5, 8)
        hamiltonian = nk.operator.Ising(hilbert, nk.graph.Chain(8), h=1.0)
        machine = nk.models.RBM(alpha=1, param_dtype=float)
    elif model == "gcnn-16":
        graph = nk.graph.Chain(16)
        hilbert = nk.hilbert.Spin(0.5, 16, total_sz=0)
        hamiltonian = nk.operator.Heisenberg(hilbert, graph)
        machine = nk.models.GCNN(symmetries=graph, layers=4, features=8, param_dtype=complex)
    elif model == "mlp-100":
        hilbert = nk.hilbert.Spin(0.5, 16)
        hamiltonian = nk.operator.Ising(hilbert, nk.graph.Chain(16), h=1.0)
        machine = nk.models.MLP(hidden_dims=(8,) * 100, param_dtype=float)
    else:
        raise SystemExit(f"unknown model {model}")
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=16)
    state = nk.vqs.MCState(sampler, machine, n_samples=64, seed=1, sampler_seed=2)
    driver = nk.driver.VMC(hamiltonian, optax.adam(1e-3), variational_state=state)
    driver.run(2, out=None, show_progress=False)  # Adam's moments and the chains exist
    return driver


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def raw_write(path: Path, arrays) -> None:
    with open(path, "wb") as f:
        for a in arrays:
            f.write(memoryview(np.ascontiguousarray(a)).cast("B"))
        f.flush()
        os.fsync(f.fileno())


def measure(model: str, repeat: int, parent: Path) -> dict:
    driver = build(model)
    payload = content.payload(driver, driver.step_count, False, None, loggers={}, callbacks={})
    state = nkserde.state_dict(payload)
    arrays: list = []
    tree_codec.encode(state, arrays)
    with tempfile.TemporaryDirectory(dir=parent) as tmp:
        file, raw = Path(tmp) / "ckpt.nkserde", Path(tmp) / "raw.bin"
        times = {
            "state_dict": median_seconds(lambda: nkserde.state_dict(payload), repeat),
            "host_copy": median_seconds(lambda: host_copy(state), repeat),
            "encode": median_seconds(lambda: tree_codec.encode(state, [], [], types={}), repeat),
            "save": median_seconds(lambda: nkserde.save(payload, file), repeat),
            "raw": median_seconds(lambda: raw_write(raw, arrays), repeat),
        }
    walks = times["state_dict"] + times["host_copy"] + times["encode"]
    return {
        "model": model,
        "leaves": len(arrays),
        "bytes": sum(a.nbytes for a in arrays),
        "ms": {k: round(v * 1e3, 3) for k, v in times.items()},
        "walks_over_save": round(walks / times["save"], 3),
        "save_over_raw": round(times["save"] / times["raw"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="rbm-8,gcnn-16,mlp-100")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    parent = parent_directory(args.dir)
    print(json.dumps(environment(parent)))
    print(
        f"{'model':10} {'leaves':>6} {'bytes':>9}  "
        + "  ".join(f"{k:>10}" for k in ("state_dict", "host_copy", "encode", "save", "raw"))
        + "  walks/save  save/raw  (ms, medians)"
    )
    results = []
    for model in args.models.split(","):
        r = measure(model, args.repeat, parent)
        results.append(r)
        ms = r["ms"]
        print(
            f"{model:10} {r['leaves']:6d} {r['bytes']:9d}  "
            + "  ".join(f"{ms[k]:10.3f}" for k in ("state_dict", "host_copy", "encode", "save", "raw"))
            + f"  {r['walks_over_save']:10.3f}  {r['save_over_raw']:8.2f}"
        )
    print(json.dumps({"loadavg_after": os.getloadavg(), "results": results, "jax_devices": str(jax.devices())}))


if __name__ == "__main__":
    main()
