"""Bytes read to take the variational state out of a large driver file.

    python benchmarks/partial_load.py [--sites 1000] [--alpha 8] [--dir /work/bench-tmp]

Builds a VMC driver (RBM on ``--sites`` spins, ``alpha`` hidden units per
site, float64, Adam: the optimizer state is twice the parameters), saves it,
then, in this one process, reads the variational state back two ways and
reports the bytes each read (``rchar`` and ``read_bytes`` of
/proc/self/io; ``read_bytes`` is 0 when the file is in the page cache):

* ``before``: what a user had to do before ``at=``: read the whole file
  (``load_state_dict``) and restore its ``state`` part
  (``from_state_dict``); ``nkserde.load(driver_template, path).state``
  reads the same bytes;
* ``after``: ``nkserde.load(vs_template, path, at="state")``: reads the
  header and the arrays the template asks for.

and ``open``: ``nkserde.open(path).read("state/parameters/Dense/kernel")``
(the kernel only; ``f[...]`` maps it instead, which rchar does not count).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax

jax.config.update("jax_enable_x64", True)

import netket as nk  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import nkserde  # noqa: E402


def io() -> dict:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f)}


def measure(fn):
    before = io()
    out = fn()
    after = io()
    return out, after["rchar"] - before["rchar"], after["read_bytes"] - before["read_bytes"]


def build(sites, alpha):
    hilbert = nk.hilbert.Spin(0.5, sites)
    graph = nk.graph.Chain(sites)
    H = nk.operator.Ising(hilbert, graph, h=1.0)
    vs = nk.vqs.MCState(
        nk.sampler.MetropolisLocal(hilbert, n_chains=16),
        nk.models.RBM(alpha=alpha, param_dtype=float),
        n_samples=16,
        seed=0,
    )
    opt = optax.adam(1e-3)
    driver = nk.driver.VMC(H, opt, variational_state=vs)
    # a random optimizer state, as after a run (incompressible, as real moments are)
    rng = np.random.default_rng(1)
    driver._optimizer_state = jax.tree_util.tree_map(
        lambda x: x + rng.normal(size=x.shape) if x.dtype == float and x.ndim else x, driver._optimizer_state
    )
    return driver


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sites", type=int, default=1000)
    parser.add_argument("--alpha", type=int, default=8)
    parser.add_argument("--dir", default="/work/bench-tmp")
    args = parser.parse_args()
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "driver.nks"
        driver = build(args.sites, args.alpha)
        nkserde.save(driver, path)
        size = path.stat().st_size
        template = build(args.sites, args.alpha).state
        params = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(driver.state.parameters))
        print(f"driver file: {size / 1e6:.1f} MB; parameters {params / 1e6:.1f} MB; nkserde {nkserde.__file__}")

        def before():
            return nkserde.from_state_dict(template, nkserde.load_state_dict(path)["state"])

        def after():
            return nkserde.load(template, path, at="state")

        def kernel():
            with nkserde.open(path) as f:  # read(): verified, counted by rchar (a memmap is not)
                return f.read("state/parameters/Dense/kernel")

        for name, fn in (("before", before), ("after", after), ("open", kernel)):
            out, rchar, read_bytes = measure(fn)
            print(
                f"{name:7s} rchar {rchar / 1e6:9.1f} MB ({rchar / size:6.1%} of the file)  "
                f"read_bytes {read_bytes / 1e6:8.1f} MB"
            )
            if name != "open":
                assert all(
                    np.array_equal(a, b)
                    for a, b in zip(
                        jax.tree_util.tree_leaves(out.parameters), jax.tree_util.tree_leaves(driver.state.parameters)
                    )
                )


if __name__ == "__main__":
    main()
