"""What the Checkpoint needs to know of NetKet's run loop that NetKet does
not offer as an API, built on the private names of
:mod:`nkserde.netket.internals`. Everything is read, never changed, except
where a run ends under NetKet 3.22 (:func:`fix_target_step`).

* the callbacks of the running ``run()`` call (NetKet hands a callback only
  the driver): the ``CallbackList`` on the call stack;
* where a ``run()`` call ends: the target step (NetKet 3.23, fixed before
  ``on_run_start``), TDVP's final time, or, under NetKet 3.22, the
  ``n_iter`` argument of the running ``run`` frame;
* how a run reached its end: ``RunFinished`` (3.23; a plain ``StopRun``
  before), the dynamics drivers' stop at their final time;
* which callbacks are loggers (``AbstractLog``, or NetKet's logging
  modules).
"""

from __future__ import annotations

import netket as nk

from ..errors import UnsupportedNetKetError
from . import internals

# A stop NetKet ends quietly as a finished run (3.23; a plain StopRun before).
RUN_FINISHED = getattr(nk.callbacks, "RunFinished", nk.callbacks.StopRun)
REACHED_END: tuple = internals.END_TIME_STOPS


def reached_end(stop) -> bool:
    """Whether the StopRun ``stop`` says the run reached its end (NetKet
    3.23's RunFinished; before it no stop says so)."""
    return RUN_FINISHED is not nk.callbacks.StopRun and isinstance(stop, RUN_FINISHED)


def end_other_callbacks(callback, step, driver) -> None:
    """Calls ``on_run_end`` of the callbacks that NetKet calls after
    ``callback`` in the running ``run()`` call, in NetKet's order: for a
    callback that ends the program from its own ``on_run_end``
    (``SystemExit``, ``KeyboardInterrupt``), which would otherwise keep
    them from finishing (loggers flush their files there)."""
    callback_list = internals.running_callback_list()
    if callback_list is None:
        return
    entries = tuple(callback_list.callbacks)
    for i, entry in enumerate(entries):
        if any(c is callback for c in _wrapped_chain(entry)):
            break
    else:
        return
    for entry in entries[i + 1 :]:
        entry.on_run_end(step, driver)


def _wrapped_chain(callback):
    """``callback`` and the callbacks it wraps (TDVP wraps loggers and
    callbacks to call them at stopping times only)."""
    yield callback
    while isinstance(getattr(callback, "callback", None), nk.callbacks.AbstractCallback):
        callback = callback.callback
        yield callback


def running_callbacks() -> tuple:
    """The callbacks of the running ``driver.run`` call, unwrapped (TDVP
    wraps loggers and callbacks to call them at stopping times only)."""
    callback_list = internals.running_callback_list()
    if callback_list is None:
        return ()
    return tuple(list(_wrapped_chain(callback))[-1] for callback in callback_list.callbacks)


# NetKet's loggers that are callbacks, not AbstractLogs (WandbLog from 3.23)
LOGGER_CALLBACKS = tuple(
    c for c in (getattr(nk.logging, name, None) for name in ("HDF5Log", "TensorBoardLog", "MLFlowLog", "WandbLog"))
    if isinstance(c, type)
)  # fmt: skip


def is_logger(callback) -> bool:
    """NetKet's loggers: the AbstractLogs, and those that are callbacks
    themselves (HDF5Log, TensorBoardLog, MLFlowLog, WandbLog)."""
    return isinstance(callback, (nk.logging.AbstractLog, *LOGGER_CALLBACKS))


def target(driver):
    """Where the current run() call ends: TDVP's final time, else the step
    (None where NetKet does not record it: see :func:`fix_target_step`)."""
    t_end = internals.end_time(driver)
    return float(t_end) if t_end is not None else internals.target_step(driver)


def fix_target_step(driver) -> int:
    """NetKet 3.23 fixes where a run() call ends before ``on_run_start``, so
    a callback that restores ``step_count`` there moves the start and not
    the end. NetKet 3.22's loop counts ``n_iter`` from the step count after
    ``on_run_start``: the end is fixed here from the ``n_iter`` of the
    running ``run`` call and returned; the caller stops the run there."""
    n_iter = internals.running_n_iter(driver)
    if n_iter is None:
        raise UnsupportedNetKetError(
            f"nkserde.Checkpoint: cannot tell where {type(driver).__name__}.run of NetKet "
            f"{nk.__version__} ends (no n_iter in its run call); save and load the driver with "
            f"nkserde.save / nkserde.load instead"
        )
    # what NetKet 3.23 sets; target() and asks_for_more() read it
    internals.set_target_step(driver, driver.step_count + n_iter)
    return internals.target_step(driver)


def asks_for_more(driver, saved_target) -> bool:
    """Whether this run() call goes beyond the end of the one that stopped
    for good (a larger n_iter, a longer T)."""
    t_end = internals.end_time(driver)
    if t_end is not None:  # TDVP
        return bool(driver.t < t_end)
    if saved_target is None:  # written before targets were recorded
        return False
    return internals.target_step(driver) > saved_target
