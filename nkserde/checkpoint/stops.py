"""Why a run stopped: an interruption the same script resumes, or a final
stop (a convergence criterion, the end of the run) that it does not; and
where the driver was in its step when it did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import netket as nk

from ..netket import internals, run_loop

if TYPE_CHECKING:
    from .run_state import Run

# Stops that end a run for good: convergence criteria. Any other stop (a
# signal, Timeout, another callback) is an interruption the next run resumes.
FINAL_STOPS = (nk.callbacks.EarlyStopping, nk.callbacks.ConvergenceStopping)


class NothingToDo(run_loop.RUN_FINISHED):
    """Raised by the Checkpoint when the checkpointed run already ended."""


class ReachedTarget(run_loop.RUN_FINISHED):
    """Raised by the Checkpoint where NetKet's loop does not stop a resumed
    run at the end of the run() call itself (NetKet 3.22)."""


def classify_stop(stop: BaseException | None, final_stops=FINAL_STOPS) -> tuple[bool, str | None]:
    """(is it final, the name of what raised it) for ``stop``, the exception
    NetKet is handling when the run ends (None or not a StopRun: the run
    reached its end, or failed; both final for this purpose). The raiser is
    the innermost callback on the StopRun's traceback."""
    if not isinstance(stop, nk.callbacks.StopRun):
        return True, None
    if isinstance(stop, (NothingToDo, ReachedTarget)) or run_loop.reached_end(stop):
        return True, None
    raiser = internals.raising_callback(stop)
    if isinstance(raiser, run_loop.REACHED_END):
        return True, None
    if isinstance(raiser, tuple(final_stops)):
        return True, type(raiser).__name__
    return False, type(raiser).__name__ if raiser is not None else "StopRun"


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, as its ``on_run_end`` sees it: ``final`` (not an
    interruption), ``raiser`` (the name of what stopped it, if anything
    did), ``mid_step`` (it stopped after a step began changing the driver
    and before its update: half a step, never checkpointed) and
    ``stopped`` (a final stop after a step's update: the checkpoint says
    the run stopped there, so a rerun of the same script stops too)."""

    final: bool
    raiser: str | None
    mid_step: bool
    stopped: bool


def how_it_ended(run: Run, driver, stop: BaseException | None, final_stops=FINAL_STOPS) -> RunEnd:
    """How ``run`` ended on ``stop`` (the exception NetKet is handling, if
    any). Sets ``run.completed``: an interruption after a step's update
    (a StopRun in ``on_step_end``, before NetKet counts the step) counts
    that step, on the driver the script holds too, and the next run
    continues with the step after it. (After a normal last step, or a
    StopRun at a step's start, NetKet has counted every step.)"""
    after_update = run.dirty_step is not None and run.dirty_step == driver.step_count
    final, raiser = classify_stop(stop, final_stops)
    run.completed = driver.step_count
    if after_update and not final:
        run.completed += 1
        internals.set_step_count(driver, run.completed)
    mid_step = run.changing == driver.step_count and not after_update
    return RunEnd(final, raiser, mid_step, stopped=after_update and final)
