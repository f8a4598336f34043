"""Interrupt a checkpointed run, then resume it by running the same script again.

    python examples/resume_after_interrupt.py --interrupt-at 30   # stops itself at step 30, exit status 75
    python examples/resume_after_interrupt.py                     # resumed from step 30, finishes

A small VMC (8-site Ising chain, RBM) runs 100 steps. The only nkserde line
is

    gs = nkserde.checkpointed(gs, directory, every=10)

before the unchanged ``gs.run(n_iter=100, out=directory / "log")``.

With ``--interrupt-at K`` the script sends itself SIGTERM at step K, as a
cluster scheduler does before it ends a job: the checkpoint callback lets
step K finish, checkpoints it (K need not be a multiple of ``every``),
stops the run and ends the program with exit status 75
(``nkserde.checkpoint.EXIT_INTERRUPTED``): nothing after ``run()`` works on
the unfinished state, and nkserde's last line says how to resume. This
first run starts fresh (``resume="never"``: checkpoints of an earlier run
are moved to ``previous-<time>/``, not deleted).

Run without it, the script finds the checkpoint, restores the driver in
place (parameters, optimizer state, sampler chains and RNG, step count, and
the JsonLog's history, so ``log.log`` holds every step once), prints
``resumed from step K`` and does the remaining steps. Each run takes well
under a minute on a laptop CPU.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from pathlib import Path

import netket as nk
import numpy as np
import optax
from netket.utils import struct

import nkserde

N_ITER = 100


def build_driver():
    """Everything the script builds before it runs, the same way every time."""
    graph = nk.graph.Chain(8)
    hilbert = nk.hilbert.Spin(0.5, N=8)
    hamiltonian = nk.operator.Ising(hilbert, graph, h=1.0)
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=16)
    state = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=512, seed=1, sampler_seed=2)
    return nk.driver.VMC(hamiltonian, optax.adam(0.02), variational_state=state), hamiltonian


class InterruptAt(nk.callbacks.AbstractCallback):
    """Sends this process SIGTERM at the end of step ``step``, as a
    scheduler could at any moment: the checkpoint callback's handler only
    takes note; the callback checkpoints step ``step`` and stops the run at
    the next step boundary."""

    step: int = struct.field(pytree_node=False, serialize=False)

    def __init__(self, step: int):
        self.step = step

    @property
    def callback_order(self) -> int:
        return 500

    def on_step_end(self, step, log_data, driver):
        if driver.step_count + 1 == self.step:  # NetKet counts the step after on_step_end
            os.kill(os.getpid(), signal.SIGTERM)


class Report(nk.callbacks.AbstractCallback):
    """Prints where the run starts (after the checkpoint callback has
    restored it) and the energy every 10 steps."""

    gs: object = struct.field(pytree_node=False, serialize=False)

    def __init__(self, gs):
        self.gs = gs

    @property
    def callback_order(self) -> int:
        return 1001

    def on_run_start(self, step, driver):
        resumed = self.gs.last_checkpoint.resumed_from
        print("starting from step 0" if resumed is None else f"resumed from step {resumed}", flush=True)

    def on_step_end(self, step, log_data, driver):
        if (driver.step_count + 1) % 10 == 0:
            print(f"  step {driver.step_count + 1:3d}  E = {log_data['Energy']}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--interrupt-at", type=int, metavar="K", help="start a fresh run and interrupt it with SIGTERM at step K"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "nkserde-resume-after-interrupt",
        help="checkpoints and log (default: %(default)s)",
    )
    args = parser.parse_args()
    if args.interrupt_at is not None and not 0 < args.interrupt_at < N_ITER:
        parser.error(f"--interrupt-at must be between 1 and {N_ITER - 1}")

    t0 = time.perf_counter()
    gs, hamiltonian = build_driver()
    # a fresh start for the run that interrupts itself; resume otherwise
    resume = "never" if args.interrupt_at is not None else "auto"
    gs = nkserde.checkpointed(gs, args.dir, every=10, resume=resume)
    callbacks = [Report(gs)]
    if args.interrupt_at is not None:
        callbacks.append(InterruptAt(args.interrupt_at))

    (log,) = gs.run(n_iter=N_ITER, out=str(args.dir / "log"), callback=callbacks, show_progress=False)

    # only a run that reached its end gets here: a signal ends the program
    energies = log.data["Energy"]
    exact = nk.exact.lanczos_ed(hamiltonian)[0]
    steps = np.asarray(energies.iters)
    assert list(steps) == list(range(N_ITER)), "the log should hold every step once"
    print(
        f"finished: {gs.step_count} steps, E = {energies['Mean'][-1].real:.5f} "
        f"(exact {exact:.5f}); log of {len(steps)} steps in {args.dir / 'log.log'} "
        f"({time.perf_counter() - t0:.1f} s)"
    )


if __name__ == "__main__":
    main()
