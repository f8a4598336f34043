"""A checkpoint directory written under one install is resumed under another.

    python tests/cross_install.py write OUT     # OUT/<install>/: a run killed after step 5
    python tests/cross_install.py resume OUT    # every other install's, resumed here; a changed coupling refused

``write`` runs the 8-site Ising chain (RBM, ``optax.adam``, a Checkpoint
every 2 steps) for 10 steps in a child process that is SIGKILLed after step
5: ``OUT/<install>/run`` holds the checkpoints of steps 2 and 4, as a
killed job leaves them. Beside it, ``fingerprints.json``: the fingerprints,
under this install, of that run and of one variant per change the table of
docs/guides/resume.md refuses. ``<install>`` names NetKet, JAX, flax, optax,
numpy and Python (``nk3.23.0-jax0.7.0-flax0.10.6-optax0.2.2-np1.26.0-py3.12``).

``resume``, for each ``OUT/<install>/`` of another install (or each
directory named): the same script resumes a copy of its run with
``resume="auto"`` from step 4 and finishes the 10 steps; the script with
``h`` changed from 1.0 to 1.5 is refused with ``RunMismatchError`` naming
``operator: Ising h 1.0 -> 1.5``; the writer's fingerprints compare with
this install's: the same run is the same, each variant is refused both ways.

Run by ``.ci/run`` across its three venvs (the oldest stack, as NetKet
3.23.0 at its floors; the main venv; Python 3.13 with the newest
releases). Exit status 0 when everything holds, 1 with the failures listed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import warnings

import jax

jax.config.update("jax_enable_x64", True)
warnings.filterwarnings("ignore")  # NetKet's advice on small sample counts: not what this checks

import netket as nk  # noqa: E402
import netket.experimental as nkx  # noqa: E402
import optax  # noqa: E402

import nkserde  # noqa: E402
from nkserde.checkpoint.fingerprint import changes, fingerprint  # noqa: E402
from nkserde.errors import RunMismatchError  # noqa: E402

L = 8
TOTAL_STEPS = 10
KILLED_AFTER = 5
EVERY = 2
RESUMED_FROM = 4  # the newest checkpoint before the kill


def install() -> str:
    names = {"netket": "nk", "jax": "jax", "flax": "flax", "optax": "optax", "numpy": "np"}
    python = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return "-".join(f"{short}{version(n)}" for n, short in names.items()) + f"-{python}"


# ------------------------------------------------------------------ the run


def ising_vmc(h=1.0):
    """The script's driver: nothing here depends on the install."""
    hilbert = nk.hilbert.Spin(0.5, N=L)
    H = nk.operator.Ising(hilbert, nk.graph.Chain(L), h=h)
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
    vs = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1, param_dtype=float), n_samples=64, seed=0, sampler_seed=1)
    return nk.driver.VMC(H, optax.adam(0.01), variational_state=vs)


class Kill(nk.callbacks.AbstractCallback):
    """SIGKILLs the process when a step starts after ``after`` steps, once
    ``checkpoint``'s write in flight is on disk (a kill inside a write is
    the kill tests' case): a job killed by the scheduler, no cleanup, the
    directory's lock left behind."""

    after: int = nk.utils.struct.field(pytree_node=False, serialize=False)
    checkpoint: object = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, after, checkpoint):
        self.after, self.checkpoint = after, checkpoint

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == self.after:
            self.checkpoint.wait()
            os.kill(os.getpid(), signal.SIGKILL)


def run(directory: Path, h=1.0, kill_after=None):
    driver = ising_vmc(h)
    ckpt = nkserde.Checkpoint(directory, every=EVERY)
    callbacks = [ckpt] + ([Kill(kill_after, ckpt)] if kill_after is not None else [])
    driver.run(TOTAL_STEPS, out=None, show_progress=False, callback=callbacks)
    return driver, ckpt


# ---------------------------------------------------- the table of resume.md


def variants() -> dict:
    """name -> (the run it changes, or None for a run of its own; a builder):
    one change per row of the table of refused changes in
    docs/guides/resume.md, on a VMC of a Heisenberg chain and a TDVP of an
    Ising chain (tests/test_fingerprint.py's builders)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import test_fingerprint as T

    def adaptive(tolerance):
        hilbert = nk.hilbert.Spin(0.5, N=L)
        return nkx.TDVP(
            nk.operator.Ising(hilbert, nk.graph.Chain(L), h=0.5),
            variational_state=nk.vqs.FullSumState(hilbert, nk.models.RBM(alpha=1, param_dtype=complex), seed=0),
            ode_solver=nkx.dynamics.RK23(dt=0.01, adaptive=True, rtol=tolerance, atol=tolerance),
        )

    def jastrow(driver):  # another architecture than the RBM (a GCNN's group takes seconds to build)
        hilbert = driver.state.hilbert
        sampler = nk.sampler.MetropolisExchange(hilbert, graph=nk.graph.Chain(L, max_neighbor_order=2), n_chains=8)
        vs = nk.vqs.MCState(sampler, nk.models.Jastrow(param_dtype=float), n_samples=64, n_discard_per_chain=2, seed=0)
        return nk.driver.VMC(
            T.heisenberg(), optax.sgd(0.01), variational_state=vs, preconditioner=driver.preconditioner
        )

    def large(h):  # 100 spins: a space NetKet cannot count, its operator by 64 states
        hilbert = nk.hilbert.Spin(0.5, N=100)
        H = nk.operator.Ising(hilbert, nk.graph.Chain(100), h=h)
        vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert, n_chains=8), nk.models.RBM(), n_samples=64, seed=0)
        return nk.driver.VMC(H, optax.sgd(0.01), variational_state=vs)

    return {
        "vmc": (None, lambda: T.vmc()),
        "coupling": ("vmc", lambda: T.vmc(J2=0.8)),
        "operator term": ("vmc", lambda: T.vmc(field=0.3)),
        "lattice": ("vmc", lambda: T.vmc(pbc=False)),
        "constraint": ("vmc", lambda: T.vmc(total_sz=None)),
        "model architecture": ("vmc", lambda: jastrow(T.vmc())),
        "model width": ("vmc", lambda: T.vmc(alpha=2)),
        "symmetry group": ("gcnn", lambda: T.vmc(model="gcnn-translations")),
        "gcnn": (None, lambda: T.vmc(model="gcnn-irreps")),
        "sampler rule": ("vmc", lambda: T.vmc(sampler="hamiltonian")),
        "number of chains": ("vmc", lambda: T.vmc(n_chains=16)),
        "n_samples": ("vmc", lambda: T.vmc(n_samples=128)),
        "n_discard_per_chain": ("vmc", lambda: T.vmc(n_discard=4)),
        "optimizer": ("vmc", lambda: T.vmc(optimizer=optax.adam(0.01))),
        "learning rate": ("vmc", lambda: T.vmc(optimizer=optax.sgd(0.02))),
        "learning rate schedule": ("vmc", lambda: T.vmc(optimizer=optax.sgd(optax.linear_schedule(0.01, 0.001, 100)))),
        "preconditioner diag_shift": ("vmc", lambda: T.vmc(diag_shift=0.1)),
        "large lattice": (None, lambda: large(1.0)),
        "coupling on a large lattice": ("large lattice", lambda: large(1.5)),
        "tdvp": (None, lambda: T.tdvp()),
        "generator": ("tdvp", lambda: T.tdvp(h=2.0)),
        "time step": ("tdvp", lambda: T.tdvp(dt=0.02)),
        "integrator": ("tdvp", lambda: T.tdvp(solver="Heun")),
        "adaptive tdvp": (None, lambda: adaptive(1e-3)),
        "tolerances": ("adaptive tdvp", lambda: adaptive(1e-4)),
    }


def fingerprints() -> dict:
    return {name: fingerprint(build()) for name, (_, build) in variants().items()}


def refused_variants(mine: dict, theirs: dict) -> list[str]:
    """What fails when this install's fingerprints meet the other's: the
    same run must be the same, each change refused both ways."""
    failures = []
    for name, (base, _) in variants().items():
        if name not in theirs:
            failures.append(f"{name}: not in the other install's fingerprints")
            continue
        same = changes(theirs[name], mine[name])
        if same:
            failures.append(f"{name}: the same script is refused across installs: {same}")
        if base is not None and not (changes(theirs[base], mine[name]) and changes(theirs[name], mine[base])):
            failures.append(f"{name}: not refused across installs")
    return failures


# ---------------------------------------------------------------- commands


def write(out: Path) -> Path:
    here = out / install()
    if here.exists():
        shutil.rmtree(here)
    here.mkdir(parents=True)
    child = subprocess.run(
        [sys.executable, __file__, "killed-run", str(here / "run")], capture_output=True, text=True, timeout=600
    )
    if child.returncode != -signal.SIGKILL:
        raise SystemExit(f"{here}: the run was to be killed after step {KILLED_AFTER}:\n{child.stderr[-3000:]}")
    steps = nkserde.Checkpoint(here / "run").steps()
    if steps != [EVERY, RESUMED_FROM]:
        raise SystemExit(f"{here}: expected checkpoints of steps {[EVERY, RESUMED_FROM]}, found {steps}")
    (here / "fingerprints.json").write_text(json.dumps(fingerprints(), indent=1, sort_keys=True))
    print(f"{install()}: wrote {here} (killed after step {KILLED_AFTER}, checkpoints {steps})")
    return here


def resume(directories: list[Path]) -> list[str]:
    failures = []
    own = [d / install() for d in directories if (d / install() / "fingerprints.json").is_file()]
    # this install's own fingerprints, if it wrote them (computing them takes a while)
    mine = json.loads((own[0] / "fingerprints.json").read_text()) if own else fingerprints()
    written_ones = []
    for d in directories:
        if (d / "run").is_dir():
            written_ones.append(d)
        else:  # OUT: every install's directory but this one's
            written_ones += sorted(p for p in d.iterdir() if (p / "run").is_dir() and p.name != install())
    if not written_ones:
        return [f"no directory of another install in {', '.join(map(str, directories))}"]
    for written in written_ones:
        who = f"{written.name} -> {install()}"
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "run"
            shutil.copytree(written / "run", copy)
            # the same script, resumed
            driver, ckpt = run(copy)
            if ckpt.resumed_from != RESUMED_FROM or driver.step_count != TOTAL_STEPS:
                failures.append(f"{who}: resumed from {ckpt.resumed_from}, ended at step {driver.step_count}")
            else:
                print(f"{who}: resumed from step {ckpt.resumed_from}, finished at step {driver.step_count}")
            # a changed coupling, refused (a fresh copy: the resumed one is finished)
            shutil.rmtree(copy)
            shutil.copytree(written / "run", copy)
            try:
                run(copy, h=1.5)
                failures.append(f"{who}: h 1.0 -> 1.5 was resumed")
            except RunMismatchError as exc:
                if exc.changes != ["operator: Ising h 1.0 -> 1.5"]:
                    failures.append(f"{who}: h 1.0 -> 1.5 refused as {exc.changes}")
                else:
                    print(f"{who}: refused {exc.changes[0]!r}")
        theirs = json.loads((written / "fingerprints.json").read_text())
        found = refused_variants(mine, theirs)
        failures += [f"{who}: {f}" for f in found]
        if not found:
            refused = sum(base is not None for base, _ in variants().values())
            print(f"{who}: {len(mine)} fingerprints: the same runs are the same, {refused} changes refused both ways")
    return failures


def main(argv) -> int:
    if len(argv) >= 2 and argv[0] == "killed-run":
        run(Path(argv[1]), kill_after=KILLED_AFTER)
        return 1  # not reached: killed
    if len(argv) == 2 and argv[0] == "write":
        write(Path(argv[1]))
        return 0
    if len(argv) >= 2 and argv[0] == "resume":
        failures = resume([Path(a) for a in argv[1:]])
        for f in failures:
            print(f"FAILED {f}", file=sys.stderr)
        return 1 if failures else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
