"""One checkpointed float32 VMC run in a process of its own, on whatever
device JAX picks (the chip, for tests/accelerator_suite.py; the CPU under
``JAX_PLATFORMS=cpu``).

    python accelerator_run.py WORKDIR --steps N [--every E] [--kill-after K] [--load-only] [--fingerprint]

The run: 16 spins, ``nk.operator.IsingJax``, an RBM of float32 parameters
(NetKet's float64 ``log_cosh`` does not run on a TPU), Metropolis, Adam,
``nkserde.Checkpoint(WORKDIR/ckpt, every=E)``, a JsonLog at WORKDIR/log.
``--kill-after K``: SIGKILL at the end of step K, after the Checkpoint's
hook. At the end, WORKDIR/result.npz holds the final parameters and the
logged energies. ``--load-only``: instead of a run, the newest checkpoint
of WORKDIR/ckpt loaded into a driver built here, its parameters to
WORKDIR/loaded.npz. ``--fingerprint``: instead of a run, the run's
fingerprint (what a Checkpoint compares) to WORKDIR/fingerprint.json.

It prints, flushed: ``platform <name>``, the nkserde lines (resumed, ...),
``step <k>`` after every step, ``finished step_count=<n>``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import netket as nk
import numpy as np
import optax

import nkserde
from nkserde.checkpoint.fingerprint import fingerprint

N = 16


def build(activation=None, learning_rate=1e-2):
    """The run's driver (a fingerprint test's: with another activation or
    learning rate)."""
    hilbert = nk.hilbert.Spin(0.5, N=N)
    hamiltonian = nk.operator.IsingJax(hilbert, nk.graph.Chain(N), h=1.0)
    model = nk.models.RBM(
        alpha=2, param_dtype=jnp.float32, **({} if activation is None else {"activation": activation})
    )
    vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert, n_chains=16), model, n_samples=512, seed=0, sampler_seed=1)
    return nk.driver.VMC(hamiltonian, optax.adam(learning_rate), variational_state=vs)


def flat_parameters(driver) -> dict:
    leaves = jax.tree_util.tree_leaves_with_path(driver.state.parameters)
    return {jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves}


class StepLine(nk.callbacks.AbstractCallback):
    """Prints ``step <k>`` at the end of step k (after the Checkpoint, which
    is first); SIGKILL after ``kill_after``."""

    kill_after: int | None = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, kill_after):
        self.kill_after = kill_after

    def on_step_end(self, step, log_data, driver):
        print(f"step {driver.step_count + 1}", flush=True)
        if self.kill_after is not None and driver.step_count + 1 == self.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--kill-after", type=int, default=None)
    parser.add_argument("--load-only", action="store_true")
    parser.add_argument("--fingerprint", action="store_true")
    args = parser.parse_args()
    print(f"platform {jax.default_backend()}", flush=True)
    if args.fingerprint:
        args.workdir.mkdir(parents=True, exist_ok=True)
        (args.workdir / "fingerprint.json").write_text(json.dumps(fingerprint(build()), indent=1, sort_keys=True))
        return 0
    if args.load_only:
        loaded = nkserde.load(build(), args.workdir / "ckpt")
        np.savez(args.workdir / "loaded.npz", step_count=loaded.step_count, **flat_parameters(loaded))
        return 0
    driver = build()
    ckpt = nkserde.Checkpoint(args.workdir / "ckpt", every=args.every, keep=100)
    log = nk.logging.JsonLog(str(args.workdir / "log"), mode="append", save_params=False)
    driver.run(args.steps, out=log, callback=[ckpt, StepLine(args.kill_after)], show_progress=False)
    energies = json.loads((args.workdir / "log.log").read_text())["Energy"]["Mean"]
    np.savez(args.workdir / "result.npz", energies=np.asarray(energies), **flat_parameters(driver))
    print(f"finished step_count={driver.step_count}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
