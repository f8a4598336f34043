"""What the Checkpoint needs to know of NetKet's run loop that NetKet does
not offer as an API: the one place to adapt when a NetKet release changes
its loop. Everything here is read, never changed, except ``_target_step``
where NetKet 3.22 lacks it (:func:`fix_target_step`).

* the callbacks of the running ``run()`` call (NetKet hands a callback only
  the driver): found as the ``CallbackList`` on the call stack;
* where a ``run()`` call ends: ``driver._target_step`` (NetKet 3.23, fixed
  before ``on_run_start``), ``driver._t_end`` (TDVP), or, under NetKet 3.22,
  the ``n_iter`` argument of the running ``run`` frame;
* how a run reached its end: ``RunFinished`` (3.23; a plain ``StopRun``
  before), the dynamics drivers' ``_StopAtTime``;
* which callbacks are loggers (``AbstractLog``, or NetKet's logging
  modules).
"""

from __future__ import annotations

import sys

import netket as nk

from ..errors import UnsupportedNetKetError

# A stop NetKet ends quietly as a finished run (3.23; a plain StopRun before).
RUN_FINISHED = getattr(nk.callbacks, "RunFinished", nk.callbacks.StopRun)
try:  # the stop of NetKet's generic dynamics drivers at their final time
    from netket._src.callbacks.stop_at_time import _StopAtTime

    REACHED_END: tuple = (_StopAtTime,)
except ImportError:
    REACHED_END = ()


def reached_end(stop) -> bool:
    """Whether the StopRun ``stop`` says the run reached its end (NetKet
    3.23's RunFinished; before it no stop says so)."""
    return RUN_FINISHED is not nk.callbacks.StopRun and isinstance(stop, RUN_FINISHED)


def running_callbacks() -> tuple:
    """The callbacks of the running ``driver.run`` call, unwrapped (TDVP
    wraps loggers and callbacks to call them at stopping times only)."""
    from netket._src.callbacks.callback_list import CallbackList

    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, CallbackList):
            found = []
            for callback in owner.callbacks:
                while isinstance(getattr(callback, "callback", None), nk.callbacks.AbstractCallback):
                    callback = callback.callback
                found.append(callback)
            return tuple(found)
        frame = frame.f_back
    return ()


def is_logger(callback) -> bool:
    """NetKet loggers that are callbacks themselves (HDF5Log, TensorBoardLog)."""
    return isinstance(callback, nk.logging.AbstractLog) or type(callback).__module__.startswith("netket._src.logging")


def target(driver):
    """Where the current run() call ends: TDVP's final time, else the step
    (None where NetKet does not record it: see :func:`fix_target_step`)."""
    t_end = getattr(driver, "_t_end", None)
    return float(t_end) if t_end is not None else getattr(driver, "_target_step", None)


def fix_target_step(driver) -> int:
    """NetKet 3.23 fixes where a run() call ends (``_target_step``) before
    ``on_run_start``, so a callback that restores ``step_count`` there moves
    the start and not the end. NetKet 3.22's loop counts ``n_iter`` from the
    step count after ``on_run_start``: the end is fixed here from the
    ``n_iter`` of the running ``run`` call (the argument's name is the
    NetKet-private fact this needs) and returned; the caller stops the run
    there."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "run" and frame.f_locals.get("self") is driver:
            n_iter = frame.f_locals.get("n_iter")
            if isinstance(n_iter, int) and not isinstance(n_iter, bool):
                # what NetKet 3.23 sets; target() and asks_for_more() read it
                object.__setattr__(driver, "_target_step", driver.step_count + n_iter)
                return driver._target_step
        frame = frame.f_back
    raise UnsupportedNetKetError(
        f"nkserde.Checkpoint: cannot tell where {type(driver).__name__}.run of NetKet "
        f"{nk.__version__} ends (no n_iter in its run call); save and load the driver with "
        f"nkserde.save / nkserde.load instead"
    )


def asks_for_more(driver, saved_target) -> bool:
    """Whether this run() call goes beyond the end of the one that stopped
    for good (a larger n_iter, a longer T)."""
    t_end = getattr(driver, "_t_end", None)
    if t_end is not None:  # TDVP
        return bool(driver.t < t_end)
    if saved_target is None:  # written before targets were recorded
        return False
    return driver._target_step > saved_target
