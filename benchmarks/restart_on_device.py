"""A restart on a GPU or TPU: the first step of a run that compiles,
against the first step of the same script resumed in a new process with
nkserde's compilation cache.

    python benchmarks/restart_on_device.py [--sites 100] [--alpha 64] [--samples 4096] [--dir DIR]

The model of the issue that asked for it: an RBM (``--alpha``, float32
parameters) on ``--sites`` spins, ``nk.operator.IsingJax`` on a chain,
``--samples`` samples of a local Metropolis sampler (16 chains), Adam,
``nkserde.Checkpoint(every=5)``. A first process runs 10 steps with a
compilation cache of its own, empty (``NKSERDE_COMPILATION_CACHE``, a
fresh directory); a second process runs the same script to 15 steps: it
resumes from step 10 and takes its compiled code from that cache. Each
process is the script alone (``--child``); printed: each step's time
(until its parameters are ready), the time to import and build, and the
Checkpoint's own line on the resume. Figures on a TPU v5e:
docs/guides/accelerators.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _environment import parent_directory  # noqa: E402


def child(work: Path, steps: int, sites: int, alpha: int, samples: int) -> None:
    started = time.perf_counter()
    import jax
    import jax.numpy as jnp
    import netket as nk
    import optax

    import nkserde

    hilbert = nk.hilbert.Spin(0.5, N=sites)
    hamiltonian = nk.operator.IsingJax(hilbert, nk.graph.Chain(sites), h=1.0)
    state = nk.vqs.MCState(
        nk.sampler.MetropolisLocal(hilbert, n_chains=16),
        nk.models.RBM(alpha=alpha, param_dtype=jnp.float32),
        n_samples=samples,
        seed=0,
        sampler_seed=1,
    )
    driver = nk.driver.VMC(hamiltonian, optax.adam(1e-2), variational_state=state)
    built = time.perf_counter()

    class StepTimes(nk.callbacks.AbstractCallback):
        def on_step_end(self, step, log_data, driver):
            jax.block_until_ready(driver.state.parameters)
            now = time.perf_counter()
            print(f"  step {driver.step_count + 1}: {now - last[0]:.2f} s", flush=True)
            last[0] = now

    last = [time.perf_counter()]
    driver.run(steps, callback=[nkserde.Checkpoint(work / "ckpt", every=5), StepTimes()], show_progress=False)
    print(f"  import and build {built - started:.1f} s, in all {time.perf_counter() - started:.1f} s", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sites", type=int, default=100)
    p.add_argument("--alpha", type=int, default=64)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--dir", default=None, help="where the files go (default: see benchmarks/_environment.py)")
    p.add_argument("--child", nargs=2, metavar=("WORK", "STEPS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(Path(args.child[0]), int(args.child[1]), args.sites, args.alpha, args.samples)
        return 0
    work = Path(tempfile.mkdtemp(prefix="restart-on-device-", dir=parent_directory(args.dir)))
    env = {**os.environ, "NKSERDE_COMPILATION_CACHE": str(work / "compiled")}
    model = ["--sites", str(args.sites), "--alpha", str(args.alpha), "--samples", str(args.samples)]
    for what, steps in (("first run, empty cache: 10 steps", 10), ("the same script resumed: to 15 steps", 15)):
        print(what, flush=True)
        command = [sys.executable, __file__, *model, "--child", str(work), str(steps)]
        subprocess.run(command, env=env, check=True)
    print(f"files in {work}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
