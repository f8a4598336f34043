"""Interrupted anywhere: an exception or a Ctrl-C at every hook NetKet calls
in a step, and inside a save, never leaves half a step in a checkpoint.
Whatever stopped the run, the same script run again ends bit for bit as
the run never interrupted (parameters, optimizer state, sampler chains and
RNG keys, step count, the logged history).

In one process: the first run is stopped at step ``AT`` by an exception
(RuntimeError) or a KeyboardInterrupt raised from a callback's hook, or by
a real SIGINT sent to this process there (Ctrl-C: NetKet's loop sees it
where the interpreter takes it); the rerun continues to ``STEPS``. The
hooks are those NetKet calls in order: on_step_start, on_compute_update_start
(the sampling comes next), on_compute_update_end (after sampling, before
the update), before_parameter_update, on_step_end; and "save": inside the
Checkpoint's write of a checkpoint. VMC, VMC_SR and TDVP (an MCState, so
sampler chains are at stake), ``every`` 1 and 3, synchronous and
background writers, in a covering design rather than the full product.
"""

from __future__ import annotations

import contextlib
import os
import signal
import warnings
from pathlib import Path

import netket as nk
import numpy as np
import pytest

import builders as B
import nkserde

STEPS = 6
AT = 4  # the step the first run is interrupted in (every=3: the last checkpoint before it is step 3)
HOOKS = ("on_step_start", "on_compute_update_start", "on_compute_update_end", "before_parameter_update", "on_step_end")


def build(name):
    if name == "tdvp":
        return B.tdvp(exact=False)
    return B.vmc() if name == "vmc" else B.vmc_sr()


def amount(name, steps):
    return round(steps * 0.01, 10) if name == "tdvp" else steps


class Interrupt(nk.callbacks.AbstractCallback):
    """At step ``at``, in ``hook``: raises ``what`` (an exception class),
    or sends this process ``signal`` (SIGINT: a real Ctrl-C)."""

    hook: str = nk.utils.struct.field(pytree_node=False, serialize=False)
    at: int = nk.utils.struct.field(pytree_node=False, serialize=False)
    what: object = nk.utils.struct.field(pytree_node=False, serialize=False)
    count: int = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, hook, at, what, count=1):
        self.hook, self.at, self.what, self.count = hook, at, what, count

    @property
    def callback_order(self) -> int:
        return 100  # after the Checkpoint (-1000) and the loggers (10)

    def _maybe(self, hook, driver):
        if hook != self.hook or driver.step_count != self.at or self.count <= 0:
            return
        self.count -= 1
        if isinstance(self.what, int):  # a signal
            os.kill(os.getpid(), self.what)
        else:
            raise self.what(f"interrupted in {hook} at step {self.at}")

    def on_step_start(self, step, log_data, driver):
        self._maybe("on_step_start", driver)

    def on_compute_update_start(self, step, log_data, driver):
        self._maybe("on_compute_update_start", driver)

    def on_compute_update_end(self, step, log_data, driver):
        self._maybe("on_compute_update_end", driver)

    def before_parameter_update(self, step, log_data, driver):
        self._maybe("before_parameter_update", driver)

    def on_step_end(self, step, log_data, driver):
        self._maybe("on_step_end", driver)


@contextlib.contextmanager
def interrupting_a_save(step: int, what):
    """Raises ``what`` (or sends the signal) inside the write of
    step-<step>.nks, after its data and before it is published."""
    original = nkserde.format.writer.atomic_write
    name = f"step-{step:010d}.nks"
    fired = []

    @contextlib.contextmanager
    def atomic_write(target):
        with original(target) as f:
            yield f
            if Path(target).name == name and not fired:
                fired.append(True)
                if isinstance(what, int):
                    os.kill(os.getpid(), what)
                else:
                    raise what(f"interrupted while writing {name}")

    nkserde.format.writer.atomic_write = atomic_write
    try:
        yield
    finally:
        nkserde.format.writer.atomic_write = original


@pytest.fixture(autouse=True)
def _ctrl_c_raises(default_sigint):
    """Every Ctrl-C case needs Python's SIGINT handler (see conftest)."""


@pytest.fixture(scope="module")
def references():
    made = {}

    def reference(name):
        if name not in made:
            driver = build(name)
            log = nk.logging.RuntimeLog()
            driver.run(amount(name, STEPS), out=log, show_progress=False)
            made[name] = (B.leaves(driver), _history(log))
        return made[name]

    return reference


def _history(log):
    key = "Energy" if "Energy" in log.data else "Generator"
    return np.asarray(log.data[key]["Mean"]).tobytes(), list(log.data[key].iters)


KINDS = {"exception": RuntimeError, "KeyboardInterrupt": KeyboardInterrupt, "Ctrl-C": signal.SIGINT}
DRIVERS = ("vmc", "vmc_sr", "tdvp")
# Each hook with each kind, at every=3 (with every=1 a checkpoint is taken
# at every step's start, and half a step could never be the newest); the
# drivers and the writers alternate. Then every=1 for each driver and kind.
CASES = (
    [
        (hook, kind, DRIVERS[(i + j) % 3], 3, (i + j) % 2 == 0)
        for i, hook in enumerate(HOOKS)
        for j, kind in enumerate(KINDS)
    ]
    + [("on_compute_update_end", kind, name, 1, j % 2 == 1) for j, (kind, name) in enumerate(zip(KINDS, DRIVERS))]
    + [
        # a save in the run's own thread (a Ctrl-C reaches the main thread only;
        # a background write is interrupted through the step it overlaps)
        ("save", kind, name, every, False)
        for kind, (name, every) in zip(KINDS, [("vmc", 3), ("vmc_sr", 1), ("tdvp", 3)])
    ]
)


@pytest.mark.parametrize("hook, kind, name, every, async_save", CASES)
def test_interrupted_anywhere_the_rerun_ends_as_the_uninterrupted_run(
    hook, kind, name, every, async_save, references, tmp_path
):
    what = KINDS[kind]
    options = {"every": every, "async_save": async_save}
    expected = RuntimeError if what is RuntimeError else KeyboardInterrupt
    # in a save: the checkpoint written in step AT's start (every=1), or the
    # last one before the interruption (every=3: step 3)
    saved_step = AT if every == 1 else 3
    interrupt = [] if hook == "save" else [Interrupt(hook, AT, what)]
    writing = interrupting_a_save(saved_step, what) if hook == "save" else contextlib.nullcontext()

    def first_run():
        build(name).run(
            amount(name, STEPS),
            out=nk.logging.RuntimeLog(),
            show_progress=False,
            callback=[nkserde.Checkpoint(tmp_path, **options), *interrupt],
        )

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        if hook == "save" and what is RuntimeError:
            # a write that fails costs that checkpoint (on_write_error="warn")
            with writing:
                first_run()
        else:
            with writing, pytest.raises(expected):
                first_run()
    said = "\n".join(str(w.message) for w in warned)
    steps = nkserde.Checkpoint(tmp_path).steps()
    assert steps, "nothing was checkpointed"
    assert all(nkserde.verify(nkserde.Checkpoint(tmp_path).path(s)) for s in steps)
    if kind == "Ctrl-C" and hook in HOOKS[1:]:
        # Ctrl-C once the step began changing the driver: the step finishes
        # and is checkpointed before the KeyboardInterrupt
        assert steps[-1] == AT + 1, steps
    if kind == "Ctrl-C" and hook == "save":
        assert steps[-1] == saved_step  # the save finished, then Ctrl-C
    if hook == "save" and what is KeyboardInterrupt:
        # a KeyboardInterrupt cut the write short: retried on the way out
        # (the driver is at the step boundary)
        assert steps[-1] == saved_step, steps
    if hook == "save" and what is RuntimeError:
        assert saved_step not in steps and steps[-1] == STEPS, steps
        assert f"writing {tmp_path / f'step-{saved_step:010d}.nks'} failed" in said, said
    if kind != "Ctrl-C" and hook in HOOKS[1:]:
        # struck after the sampling began: half a step, not checkpointed
        assert "half a step is not checkpointed" in said, said

    driver, log = build(name), nk.logging.RuntimeLog()
    ckpt = nkserde.Checkpoint(tmp_path, **options)
    driver.run(amount(name, STEPS), out=log, show_progress=False, callback=ckpt)
    assert ckpt.resumed_from == steps[-1]
    want_leaves, want_history = references(name)
    B.assert_same_leaves(B.leaves(driver), want_leaves)
    assert _history(log) == want_history  # every step once


def test_a_second_ctrl_c_stops_at_once_and_keeps_the_newest_checkpoint(references, tmp_path):
    """Two Ctrl-C in one step (after its sampling): the first would finish the
    step, the second raises at once; half a step is never checkpointed, the
    newest checkpoint (step 3) resumes and the rerun ends as the straight run."""

    class Twice(Interrupt):
        def on_compute_update_end(self, step, log_data, driver):
            self._maybe("on_compute_update_end", driver)
            self._maybe("on_compute_update_end", driver)

    interrupt = Twice("on_compute_update_end", AT, signal.SIGINT, count=2)
    with warnings.catch_warnings(record=True) as warned, pytest.raises(KeyboardInterrupt):
        warnings.simplefilter("always")
        B.vmc().run(STEPS, out=None, show_progress=False, callback=[nkserde.Checkpoint(tmp_path, every=3), interrupt])
    assert interrupt.count == 0  # both were sent
    assert any("half a step is not checkpointed" in str(w.message) for w in warned)
    assert nkserde.Checkpoint(tmp_path).steps() == [3]
    driver = B.vmc()
    driver.run(STEPS, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=3))
    B.assert_same_leaves(B.leaves(driver), references("vmc")[0])


def test_a_stop_after_sampling_before_the_update_is_not_checkpointed(references, tmp_path):
    """A callback's StopRun in on_compute_update_end (not a convergence
    criterion): the chains have moved, the parameters not; the newest
    checkpoint stays the last step boundary written."""

    class StopAfterSampling(Interrupt):
        def on_compute_update_end(self, step, log_data, driver):
            if driver.step_count == self.at:
                raise nk.callbacks.StopRun("stop after sampling")

    with pytest.warns(UserWarning, match="half a step is not checkpointed"):
        B.vmc().run(
            STEPS,
            out=None,
            show_progress=False,
            callback=[nkserde.Checkpoint(tmp_path, every=3), StopAfterSampling("x", AT, None)],
        )
    assert nkserde.Checkpoint(tmp_path).steps() == [3]
    driver = B.vmc()
    driver.run(STEPS, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=3))
    B.assert_same_leaves(B.leaves(driver), references("vmc")[0])


def test_a_short_torture(tmp_path):
    """tests/torture.py, short: three interruptions by random signals at
    random moments of the first 6.5 s after a run's imports (a rerun's
    start-up, resume and steps on a busy machine), chained to the end; each
    chain ends as the uninterrupted run (the long run's figures are in the
    notes of the change that added it)."""
    import torture

    totals = torture.torture(tmp_path, interruptions=3, seed=29, chains=1, window=(0.5, 6.5))
    assert totals["interruptions"] >= 3 and totals["chains"] >= 1
