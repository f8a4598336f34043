"""What a resumed run pays before it is back at speed, cold and with the
compilation caches, side by side.

    python benchmarks/restart.py [--models rbm,gcnn,vit] [--repeat R] [--modes cold,readme,...]
    python benchmarks/restart.py --models gcnn,rbm,vit --modes cold,readme,no-numba --repeat 3  # issue 45's figures

For each model a first process runs a few checkpointed steps (the job that
was preempted); a second process resumes it, as the requeued job does,
and reports where its time goes:

* ``import``: ``import netket, nkserde`` (and JAX);
* ``build``: building the driver (MCState init compiles the model and the
  sampler);
* ``fingerprint``: the run's fingerprint, timed where the Checkpoint's
  on_run_start computes it (nkserde.checkpoint.fingerprint);
* ``load``: the rest of the Checkpoint's on_run_start (choice, load and
  restore);
* ``first step``: the first step after the resume (it compiles);
* ``warm step``: the step after it.

Every mode runs the script as README.md shows it (``import netket as
nk``, ``import nkserde``, the driver built, a ``nkserde.Checkpoint`` of
the default options), in processes of their own:

* ``cold``: ``NKSERDE_COMPILATION_CACHE=off``: no compilation cache at all;
* ``readme``: nothing added: the caches nkserde sets by itself, in a user
  cache directory (``XDG_CACHE_HOME``) that is fresh for the first run and
  the same for its resume;
* ``line``: ``nkserde.compilation_cache(DIR)`` at the top as well (the line
  issue 31 asked scripts to add), DIR fresh per pair;
* ``no-numba``: ``readme`` without numba's cache of NetKet's kernels
  (nkserde.caches.numba_kernels.use replaced by a no-op in the process):
  what that cache saves is ``no-numba`` - ``readme``.

``--modes`` picks them (default ``cold,readme``); the first is the one the
others are divided by. The ``restart`` row is everything but the import
and one warm step (build + fingerprint + load + first step - warm step):
what issue 45's goal divides by four. The fingerprint is counted once, as
a resume pays it (it sets up the operator, numba included, and compiles
the JAX functions of its action). Min and median over ``--repeat`` pairs
of processes; the modes alternate within each repeat.

``--baseline DIR``: also a resume with the nkserde of the source tree
``DIR`` (a checkout of an older commit, e.g. ``git worktree add /tmp/base
d346256``), in the same run, in the mode ``--baseline-mode`` (default
``readme``: the README's script on that commit, e.g. issue 45's "as the
README shows it"), divided by the first mode as well.

Models: ``rbm``: RBM alpha 1 on the 8-site Ising chain, VMC, Adam, 512
samples; ``gcnn``: GCNN (2 layers, 4 features, complex) on the 4x4
Heisenberg model, VMC_SR, 256 samples (the issue's case); ``vit``: a
shrunk version of NetKet's ViT tutorial (patches of 2x2 on the 4x4
lattice, one encoder layer, embedding 8, two heads), VMC_SR, 256 samples;
``gcnn-numba``: the GCNN with its Heisenberg model as a numba
LocalOperator (what NetKet 3.22 builds; 3.23's is a jax one, whose
arrays numba packs once), whose kernels numba compiles in every process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_T0 = time.perf_counter()
PHASES = ("import", "build", "fingerprint", "load", "first step", "warm step")
MODES = ("cold", "readme", "line", "no-numba")


def child(model: str, directory: Path, mode: str, cache: str | None, steps: int) -> dict:
    """One process: resumes (or starts) ``model`` in ``directory`` and runs
    to ``steps``, as the README's script in ``mode``; returns the time of
    each phase."""
    times = {}
    if mode == "no-numba":  # (before NetKet's import: its kernels never get nkserde's cache)
        from nkserde.caches import numba_kernels

        numba_kernels.use = lambda *args, **kwargs: 0
    if mode == "line":
        import nkserde

        nkserde.compilation_cache(cache)
    import netket as nk

    import nkserde

    times["import"] = time.perf_counter() - _T0
    t = time.perf_counter()
    driver = build(model)
    times["build"] = time.perf_counter() - t
    marks = {"fingerprint": 0.0}
    from nkserde.checkpoint import fingerprint as run_fingerprint

    fingerprint = run_fingerprint.fingerprint

    def timed_fingerprint(*args, **kwargs):  # where the Checkpoint computes it, as a resume does
        t = time.perf_counter()
        try:
            return fingerprint(*args, **kwargs)
        finally:
            marks["fingerprint"] += time.perf_counter() - t

    run_fingerprint.fingerprint = timed_fingerprint

    class Before(nk.callbacks.AbstractCallback):
        @property
        def callback_order(self):
            return -2000

        def on_run_start(self, step, driver):
            marks["start"] = time.perf_counter()

        def on_step_start(self, step, log_data, driver):
            marks.setdefault("steps", []).append(time.perf_counter())

    class After(nk.callbacks.AbstractCallback):
        @property
        def callback_order(self):
            return -999

        def on_run_start(self, step, driver):
            marks["ready"] = time.perf_counter()

    ckpt = nkserde.Checkpoint(directory, every=1)  # the default options, as the README's script
    driver.run(steps, out=None, show_progress=False, callback=[Before(), ckpt, After()])
    times["fingerprint"] = marks["fingerprint"]
    times["load"] = marks["ready"] - marks["start"] - marks["fingerprint"]
    starts = marks.get("steps", [])
    if len(starts) >= 3:
        times["first step"] = starts[1] - starts[0]
        times["warm step"] = starts[2] - starts[1]
    times["resumed_from"] = ckpt.resumed_from
    return times


def build(model: str):
    import netket as nk
    import optax

    if model == "rbm":
        hilbert = nk.hilbert.Spin(0.5, N=8)
        hamiltonian = nk.operator.Ising(hilbert, nk.graph.Chain(8), h=1.0)
        sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=16)
        vs = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=512, seed=1, sampler_seed=2)
        return nk.driver.VMC(hamiltonian, optax.adam(0.01), variational_state=vs)
    graph = nk.graph.Square(4)
    hilbert = nk.hilbert.Spin(0.5, N=graph.n_nodes, total_sz=0)
    hamiltonian = nk.operator.Heisenberg(hilbert, graph)
    if model == "gcnn-numba" and hasattr(hamiltonian, "to_numba_operator"):
        hamiltonian = hamiltonian.to_numba_operator()
    sampler = nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=16)
    if model in ("gcnn", "gcnn-numba"):
        net = nk.models.GCNN(symmetries=graph, layers=2, features=4, param_dtype=complex)
    else:
        net = _vit(graph)
    vs = nk.vqs.MCState(sampler, net, n_samples=256, seed=1, sampler_seed=2)
    return nk.driver.VMC_SR(hamiltonian, optax.sgd(0.01), variational_state=vs, diag_shift=0.01)


def _vit(graph):
    """NetKet's ViT tutorial, shrunk: 2x2 patches of the 4x4 lattice,
    embedded, one encoder layer (attention with two heads and an MLP),
    summed into a complex log-amplitude."""
    import flax.linen as nn
    import jax.numpy as jnp

    class ViT(nn.Module):
        d_model: int = 8
        heads: int = 2
        patch: int = 2
        side: int = 4

        @nn.compact
        def __call__(self, x):
            b = x.shape[0]
            x = x.reshape(b, self.side // self.patch, self.patch, self.side // self.patch, self.patch)
            x = x.transpose(0, 1, 3, 2, 4).reshape(b, -1, self.patch * self.patch)
            x = nn.Dense(self.d_model, param_dtype=jnp.float64)(x)
            y = nn.LayerNorm(param_dtype=jnp.float64)(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, param_dtype=jnp.float64)(y, y)
            y = nn.LayerNorm(param_dtype=jnp.float64)(x)
            x = x + nn.Dense(self.d_model, param_dtype=jnp.float64)(nn.gelu(nn.Dense(2 * self.d_model)(y)))
            x = x.sum(axis=1)
            re = nn.Dense(1, param_dtype=jnp.float64)(x)[:, 0]
            im = nn.Dense(1, param_dtype=jnp.float64)(x)[:, 0]
            return re + 1j * im

    return ViT()


def spawn(model: str, directory: Path, mode: str, home: Path, steps: int, source: str | None = None) -> dict:
    """``child`` in a process of its own, in ``mode``, with ``home`` as the
    user's cache directory (XDG_CACHE_HOME) and the compilation cache of
    ``--modes line``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "NKSERDE_"))}
    env["XDG_CACHE_HOME"] = str(home)
    if mode == "cold":
        env["NKSERDE_COMPILATION_CACHE"] = "off"
    if source is not None:  # the baseline's nkserde, before the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (source, env.get("PYTHONPATH"))))
    command = [sys.executable, __file__, "--child", model, str(directory), mode, str(home / "line"), str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{model} ({mode}): the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="rbm,gcnn,vit")
    parser.add_argument("--modes", default="cold,readme", help=f"of {', '.join(MODES)}; the first divides the others")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline", help="a source tree of an older nkserde, resumed beside")
    parser.add_argument("--baseline-mode", default="readme", choices=MODES)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, directory, mode, cache, steps = args.child
        print(json.dumps(child(model, Path(directory), mode, cache, int(steps))))
        return
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"--modes: {', '.join(unknown)}: not one of {', '.join(MODES)}")
    if args.baseline and not (Path(args.baseline) / "nkserde" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no nkserde/__init__.py there (a source tree of nkserde)")
    runs = [(mode, None) for mode in modes]
    if args.baseline:
        runs.append((args.baseline_mode, str(Path(args.baseline).resolve())))
    names = [mode if source is None else f"base {mode}" for mode, source in runs]
    with tempfile.TemporaryDirectory(prefix="nkserde-restart-") as root:
        root = Path(root)
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        for model in args.models.split(","):
            rows = {name: [] for name in names}
            for r in range(args.repeat):
                for name, (mode, source) in zip(names, runs):
                    place = root / f"{model}-{name.replace(' ', '-')}-{r}"
                    spawn(model, place / "ckpt", mode, place / "home", 2, source)  # the job preempted after 2 steps
                    got = spawn(model, place / "ckpt", mode, place / "home", 5, source)  # the requeued job resumes it
                    assert got["resumed_from"] == 2, got
                    rows[name].append(got)
            print(f"\n{model}: seconds, min / median of {args.repeat}; ratio: of the medians, to {names[0]}")
            print(
                f"  {'phase':<12}"
                + "".join(f" {name:>15}" for name in names)
                + "".join(f" {name + '/' + names[0]:>18}" for name in names[1:])
            )
            for row in rows.values():
                for times in row:
                    times["restart"] = (
                        sum(times[p] for p in ("build", "fingerprint", "load", "first step")) - times["warm step"]
                    )
            for phase in (*PHASES, "restart"):
                medians = {name: statistics.median(t[phase] for t in rows[name]) for name in names}
                lows = {name: min(t[phase] for t in rows[name]) for name in names}
                line = f"  {phase:<12}" + "".join(f" {lows[n]:7.2f} /{medians[n]:6.2f}" for n in names)
                line += "".join(f" {_ratio(medians[n], medians[names[0]]):18.2f}" for n in names[1:])
                print(line)
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


if __name__ == "__main__":
    main()
