"""A small VMC that saves, loads and continues.

    python examples/save_load_continue.py [--dir DIR]

Runs 10 steps of VMC on an 8-site Ising chain, saves the driver, builds a
fresh driver the same way (as a restarted script would), loads the file into
it and runs 10 more steps; then checks against an uninterrupted 20-step run
that every logged energy and every final parameter is identical bit for bit.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import jax
import netket as nk
import numpy as np
import optax

import nkserde


def build_driver():
    """Everything a script builds before it runs: the template for load."""
    graph = nk.graph.Chain(8)
    hilbert = nk.hilbert.Spin(0.5, N=8)
    hamiltonian = nk.operator.Ising(hilbert, graph, h=1.0)
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=16)
    state = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=256, seed=1, sampler_seed=2)
    return nk.driver.VMC(hamiltonian, optax.adam(0.02), variational_state=state)


def energies(driver, n_steps):
    log = nk.logging.RuntimeLog()
    driver.run(n_steps, out=log, show_progress=False)
    return np.asarray(log.data["Energy"]["Mean"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", default=None, help="where to write the checkpoint")
    args = parser.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="nkserde-example-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vmc.nks"

    t0 = time.perf_counter()
    driver = build_driver()
    first = energies(driver, 10)
    nkserde.save(driver, path)
    meta = nkserde.info(path)
    print(
        f"ran 10 steps, E = {first[-1]:.6f}; saved {path} ({path.stat().st_size} bytes, "
        f"root {meta['root_type']}, step {driver.step_count})"
    )

    restored = nkserde.load(build_driver(), path)
    print(f"loaded into a fresh driver: step {restored.step_count}")
    second = energies(restored, 10)
    print(f"continued 10 steps, E = {second[-1]:.6f}")

    reference = build_driver()
    straight = energies(reference, 20)
    same_energies = np.concatenate([first, second]).tobytes() == straight.tobytes()
    same_params = all(
        np.asarray(a).tobytes() == np.asarray(b).tobytes()
        for a, b in zip(
            jax.tree_util.tree_leaves(restored.state.parameters), jax.tree_util.tree_leaves(reference.state.parameters)
        )
    )
    print(f"uninterrupted 20-step run: energies identical: {same_energies}, final parameters identical: {same_params}")
    print(f"done in {time.perf_counter() - t0:.1f} s")
    if not (same_energies and same_params):
        raise SystemExit("resume was not bit-exact")


if __name__ == "__main__":
    main()
