"""Why a run stopped: an interruption the same script resumes, or a final
stop (a convergence criterion, the end of the run) that it does not."""

from __future__ import annotations

import netket as nk

from ..netket import internals, run_loop

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
