"""What a resumed run pays before it is back at speed, cold and with JAX's
persistent compilation cache (nkserde.compilation_cache), side by side.

    python benchmarks/restart.py [--models rbm,gcnn,vit] [--repeat R]

For each model a first process runs a few checkpointed steps (the job that
was preempted); a second process resumes it, as the requeued job does,
and reports where its time goes:

* ``import``: ``import netket, nkserde`` (and JAX);
* ``build``: building the driver (MCState init compiles the model and the
  sampler);
* ``fingerprint``: the run's fingerprint, timed where the Checkpoint's
  on_run_start computes it (nkserde.checkpoint.run_fingerprint);
* ``load``: the rest of the Checkpoint's on_run_start (choice, load and
  restore);
* ``first step``: the first step after the resume (it compiles);
* ``warm step``: the step after it.

``cold``: no compilation cache anywhere. ``cache``: both processes call
``nkserde.compilation_cache(DIR)`` at their top (the documented line), so
the resumed one finds what the first compiled, the template's build
included, and NetKet's numba kernels (nkserde.caches.numba_kernels). The
``restart`` row is everything but the import and one warm step (build +
fingerprint + load + first step - warm step): what the issue's goal
divides by four. The fingerprint is counted once, as a resume pays it
(it sets up the operator, numba included, and compiles the JAX functions
of its action). Medians over ``--repeat`` pairs of processes; the cold
and cached processes alternate.

``--baseline DIR``: also a cold resume with the nkserde of the source tree
``DIR`` (a checkout of an older commit, e.g. ``git worktree add
/tmp/base 882baeb``, where issue 31 measured "today's" restart), in the
same run, and the cached restart over it: the goal of issue 31 is a
quarter of that restart, where what nkserde itself spends on a resume
(fingerprint, load) was also slower.

Models: ``rbm``: RBM alpha 1 on the 8-site Ising chain, VMC, Adam, 512
samples; ``gcnn``: GCNN (2 layers, 4 features, complex) on the 4x4
Heisenberg model, VMC_SR, 256 samples (the issue's case); ``vit``: a
shrunk version of NetKet's ViT tutorial (patches of 2x2 on the 4x4
lattice, one encoder layer, embedding 8, two heads), VMC_SR, 256 samples.
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


def child(model: str, directory: Path, cache: str | None, steps: int) -> dict:
    """One process: resumes (or starts) ``model`` in ``directory`` and runs
    to ``steps``; returns the time of each phase."""
    times = {}
    if cache:
        import nkserde

        nkserde.compilation_cache(cache)
    import netket as nk

    import nkserde

    times["import"] = time.perf_counter() - _T0
    t = time.perf_counter()
    driver = build(model)
    times["build"] = time.perf_counter() - t
    marks = {"fingerprint": 0.0}
    from nkserde.checkpoint import run_fingerprint

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

    # (no compile_cache given to a cold run: an older nkserde has no such
    # argument, and this one's "auto" is off in a cold run's environment)
    ckpt = nkserde.Checkpoint(directory, every=1, **({"compile_cache": cache} if cache else {}))
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
    sampler = nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=16)
    if model == "gcnn":
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


def spawn(model: str, directory: Path, cache: str | None, steps: int, source: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["NKSERDE_COMPILATION_CACHE"] = "off"  # the cold runs: no cache at all
    if source is not None:  # the baseline's nkserde, before the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (source, env.get("PYTHONPATH"))))
    command = [sys.executable, __file__, "--child", model, str(directory), cache or "", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{model}: the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="rbm,gcnn,vit")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline", help="a source tree of an older nkserde, resumed cold beside")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, directory, cache, steps = args.child
        print(json.dumps(child(model, Path(directory), cache or None, int(steps))))
        return
    if args.baseline and not (Path(args.baseline) / "nkserde" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no nkserde/__init__.py there (a source tree of nkserde)")
    with tempfile.TemporaryDirectory(prefix="nkserde-restart-") as root:
        root = Path(root)
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        for model in args.models.split(","):
            modes = ("cold", "cache", "base cold") if args.baseline else ("cold", "cache")
            rows = {mode: [] for mode in modes}
            for r in range(args.repeat):
                for mode in modes:
                    directory = root / f"{model}-{mode.replace(' ', '-')}-{r}"
                    cache = str(root / f"jax-cache-{model}-{r}") if mode == "cache" else None
                    source = str(Path(args.baseline).resolve()) if mode == "base cold" else None
                    spawn(model, directory, cache, 2, source)  # the job that was preempted after 2 steps
                    got = spawn(model, directory, cache, 5, source)  # the requeued job resumes it
                    assert got["resumed_from"] == 2, got
                    rows[mode].append(got)
            print(f"\n{model}:")
            base = f" {'base cold s':>11} {'cache/base':>10}" if args.baseline else ""
            print(f"  {'phase':<12} {'cold s':>8} {'cache s':>8} {'cache/cold':>10}{base}")
            medians = {}
            for mode in rows:
                medians[mode] = {p: statistics.median(row[p] for row in rows[mode]) for p in PHASES}
                m = medians[mode]
                m["restart"] = m["build"] + m["fingerprint"] + m["load"] + m["first step"] - m["warm step"]
            for phase in (*PHASES, "restart"):
                cold, warm = medians["cold"][phase], medians["cache"][phase]
                line = f"  {phase:<12} {cold:8.2f} {warm:8.2f} {_ratio(warm, cold):10.2f}"
                if args.baseline:
                    then = medians["base cold"][phase]
                    line += f" {then:11.2f} {_ratio(warm, then):10.2f}"
                print(line)
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


if __name__ == "__main__":
    main()
