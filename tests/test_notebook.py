"""nkserde in a real Jupyter kernel (issue 46): what the Interrupt button,
the run cell executed again, a dead kernel with "Restart & Run All" and a
model class defined in a cell do, each checked bit for bit (parameters,
optimizer and sampler state, step count) against the same steps run
plainly in the same kernel. docs/guides/notebooks.md is written from it.

One kernel (ipykernel, driven by jupyter_client as the notebook server
does) serves every case; a restart keeps the kernel's manager. The kernel
compiles into the test process's JAX persistent cache (tests/conftest.py),
so a restarted kernel and the plain reference runs take the compiled
code from it.

A step is held open by a callback defined in a cell (``Hold``): at its
step it writes a file and waits for another, so the Interrupt (SIGINT, as
the button sends) or the restart lands inside that step however loaded the
machine is."""

from __future__ import annotations

import json
import queue
import textwrap
import time
from pathlib import Path

import jax
import jupyter_client  # the test extra installs it, and ipykernel
import pytest


N_STEPS = 12  # the run cell's n_iter
HOLD = 5  # the step the Hold callback keeps open

# The notebook's cells, as a user writes them: imports, a model class of
# the notebook, a function that builds the driver, a Hold callback (the
# test's means of landing a signal inside a step).
SETUP = """
import hashlib, os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
import persistent_cache
persistent_cache.use({cache!r})
import flax.linen as nn
import jax, jax.numpy as jnp, numpy as np, optax
import netket as nk
import nkserde
"""

MODEL = """
class NotebookRBM(nn.Module):
    alpha: int = 1

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.alpha * x.shape[-1], param_dtype=float)(x)
        return jnp.sum(nk.nn.activation.log_cosh(x), axis=-1)
"""

BUILD = """
def build():
    hilbert = nk.hilbert.Spin(0.5, N=6)
    H = nk.operator.Ising(hilbert, nk.graph.Chain(6), h=1.0)
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
    vs = nk.vqs.MCState(sampler, NotebookRBM(), n_samples=64, n_discard_per_chain=2, seed=0, sampler_seed=1)
    return nk.driver.VMC(H, optax.adam(1e-2), variational_state=vs)

class Hold(nk.callbacks.AbstractCallback):
    "At step `step`'s end: write `reached`, wait (at most 60 s) for `go`."
    step: int = nk.utils.struct.field(pytree_node=False)
    reached: Path = nk.utils.struct.field(pytree_node=False)
    go: Path = nk.utils.struct.field(pytree_node=False)
    def __init__(self, step, reached, go):
        self.step, self.reached, self.go = step, Path(reached), Path(go)
    def on_step_end(self, step, log_data, driver):
        if driver.step_count == self.step:
            self.reached.touch()
            deadline = time.monotonic() + 60
            while not self.go.exists() and time.monotonic() < deadline:
                time.sleep(0.01)

def digest(gs):
    "The driver's whole state: step count, parameters, optimizer and sampler state, bytes exact."
    h = hashlib.sha256()
    for leaf in jax.tree.leaves((gs.state.parameters, gs._optimizer_state, gs.state.sampler_state)):
        if jnp.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        h.update(np.asarray(leaf).tobytes())
    return {"step": int(gs.step_count), "state": h.hexdigest()}

def plain(n):
    gs = build()
    gs.run(n, show_progress=False)
    return digest(gs)
"""


class Notebook:
    """One kernel, its cells executed as a notebook's front end does."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.manager = jupyter_client.KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(workdir), env=_kernel_env())
        self._connect()

    def _connect(self):
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def submit(self, code: str) -> str:
        return self.client.execute(textwrap.dedent(code), store_history=True)

    def result(self, msg_id: str, timeout: float = 300, when=None) -> str:
        """The text a cell printed (stdout, stderr, its value); raises if it
        raised. ``when=(text, action)``: ``action()`` once the cell has
        printed ``text``."""
        out, deadline = [], time.monotonic() + timeout
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
            except queue.Empty:
                raise TimeoutError(f"the cell did not finish in {timeout} s:\n{''.join(out)}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
                if when is not None and when[0] in "".join(out):
                    when[1]()
                    when = None
            elif kind == "execute_result":
                out.append(content["data"]["text/plain"] + "\n")
            elif kind == "error":
                raise AssertionError(f"the cell raised {content['ename']}: {content['evalue']}\n{''.join(out)}")
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

    def run(self, code: str, timeout: float = 300) -> str:
        return self.result(self.submit(code), timeout)

    def value(self, expression: str):
        """A JSON-able value of the kernel."""
        text = self.run(f"import json as _j; print(_j.dumps({expression}))")
        return json.loads(text.strip().splitlines()[-1])

    def restart(self):
        """The kernel died (or Kernel > Restart): a new process, nothing of the old one."""
        self.client.stop_channels()
        self.manager.restart_kernel(now=True)
        self._connect()

    def shutdown(self):
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def _kernel_env() -> dict:
    import os

    env = dict(os.environ)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return env


def wait_for(path: Path, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("notebook")
    nb = Notebook(workdir)
    try:
        nb.setup_cells = [
            SETUP.format(tests=str(Path(__file__).parent), cache=jax.config.jax_compilation_cache_dir),
            MODEL,
            BUILD,
        ]
        for cell in nb.setup_cells:
            nb.run(cell)
        yield nb
    finally:
        nb.shutdown()


def interrupted_run(nb: Notebook, run_cell: str, name: str) -> str:
    """Runs ``run_cell`` (which holds step HOLD open), presses Interrupt
    inside that step, lets the step end; returns what the cell printed."""
    reached, go = nb.workdir / f"{name}.reached", nb.workdir / f"{name}.go"
    msg_id = nb.submit(run_cell)
    wait_for(reached)
    nb.manager.interrupt_kernel()  # the Interrupt button: SIGINT to the kernel
    # the step goes on once the kernel says the Interrupt is deferred to its end
    return nb.result(msg_id, when=("finishing this step and checkpointing it", go.touch))


@pytest.mark.parametrize("form", ["callback", "checkpointed"])
def test_interrupt_then_the_run_cell_again(notebook, form):
    """Interrupt inside a step: the step ends, is checkpointed, the run
    returns ("Stopped by user."); the same cell again runs n_iter more
    steps from there, as NetKet does without nkserde: the driver ends as a
    plain run of the interrupted steps plus n_iter."""
    nb, ckpt = notebook, str(notebook.workdir / f"interrupt-{form}")
    reached, go = nb.workdir / f"{form}.reached", nb.workdir / f"{form}.go"
    if form == "callback":
        nb.run("gs = build()")
        run_cell = f"""
        hold = Hold({HOLD}, {str(reached)!r}, {str(go)!r})
        gs.run({N_STEPS}, callback=[hold, nkserde.Checkpoint({ckpt!r}, every=1)], show_progress=False)
        """
    else:
        nb.run(f"gs = nkserde.checkpointed(build(), {ckpt!r}, every=1)")
        run_cell = f"""
        hold = Hold({HOLD}, {str(reached)!r}, {str(go)!r})
        gs.run({N_STEPS}, callback=hold, show_progress=False)
        """
    first = interrupted_run(nb, run_cell, form)
    assert "Stopped by user." in first, first
    assert "finishing this step and checkpointing it" in first, first
    interrupted = nb.value("digest(gs)")
    assert interrupted["step"] == HOLD + 1  # the step the Interrupt landed in, completed
    assert interrupted == nb.value(f"plain({HOLD + 1})")
    steps = sorted(int(p.name.split("-")[-1].split(".")[0]) for p in Path(ckpt).rglob("step-*"))
    assert steps and steps[-1] == HOLD + 1, steps  # the interrupted step is on disk

    go.touch()  # the cell again: Hold lets its step pass
    again = nb.run(run_cell)
    assert "Stopped by user." not in again, again
    if form == "callback":  # a new Checkpoint of the same directory: resumes the step the Interrupt saved
        assert f"resumed VMC from step {HOLD + 1}" in again, again
    else:  # checkpointed(): the next run() call, run-1, starts fresh from the live driver
        assert nb.value("[gs.last_checkpoint.directory.name, gs.last_checkpoint.resumed_from]") == ["run-1", None]
    final = nb.value("digest(gs)")
    assert final["step"] == HOLD + 1 + N_STEPS
    assert final == nb.value(f"plain({HOLD + 1 + N_STEPS})")


def test_restart_and_run_all_resumes(notebook):
    """A kernel that dies inside a step (Kernel > Restart, an out-of-memory
    kill), then Restart & Run All: the model class of the notebook's cell
    fingerprints the same in the new kernel, the run cell resumes from the
    newest checkpoint and ends as the plain run of n_iter steps."""
    nb = notebook
    ckpt = str(nb.workdir / "restart")
    reached, go = nb.workdir / "restart.reached", nb.workdir / "restart.go"
    run_cell = f"""
    gs = build()
    ckpt = nkserde.Checkpoint({ckpt!r}, every=1)
    gs.run({N_STEPS}, callback=[Hold({HOLD}, {str(reached)!r}, {str(go)!r}), ckpt], show_progress=False)
    """
    nb.submit(run_cell)  # never finishes: its kernel is killed inside step HOLD
    wait_for(reached)
    nb.restart()
    go.touch()
    for cell in nb.setup_cells:  # Run All
        nb.run(cell)
    out = nb.run(run_cell)
    resumed = nb.value("ckpt.resumed_from")
    # step HOLD is on disk before its end (where it was killed); the next step was never checkpointed
    assert resumed == HOLD, out
    assert f"resumed VMC from step {resumed}" in out, out
    final = nb.value("digest(gs)")
    assert final["step"] == N_STEPS
    assert final == nb.value(f"plain({N_STEPS})")


def test_an_edited_model_cell(notebook):
    """The model cell edited and executed again, then the run cell: the
    model's fields are the fingerprint's, not its code (as in a script).
    A comment or a changed ``__call__`` that keeps fields and parameter
    shapes resumes; a changed field (the width) is refused."""
    nb, ckpt = notebook, str(notebook.workdir / "edited")
    run_cell = f"""
    gs = build()
    ckpt = nkserde.Checkpoint({ckpt!r}, every=1)
    gs.run(2, callback=ckpt, show_progress=False)
    """
    nb.run(run_cell)
    try:
        nb.run(MODEL.replace("@nn.compact", "# a comment\n    @nn.compact"))
        nb.run(run_cell)
        assert nb.value("ckpt.resumed_from") == 2
        nb.run(MODEL.replace("return jnp.sum(", "return 0.5 * jnp.sum("))
        nb.run(run_cell)
        assert nb.value("ckpt.resumed_from") == 2  # the same two steps asked for: resumed, nothing to do
        nb.run(MODEL.replace("alpha: int = 1", "alpha: int = 2"))
        with pytest.raises(AssertionError, match="RunMismatchError"):
            nb.run(run_cell)
    finally:
        nb.run(MODEL)
