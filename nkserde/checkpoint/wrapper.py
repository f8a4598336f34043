"""``checkpointed(driver, directory)``: every ``run`` of the driver
checkpointed, one ``run-<i>`` subdirectory per run() call."""

from __future__ import annotations

from pathlib import Path

from .._log import say
from .callback import Checkpoint
from .process_runs import PROCESS_RUNS


def checkpointed(driver, directory, **options):
    """The driver itself, with every later ``run`` checkpointed and resumed
    in ``directory``; the loggers of each run (including the JsonLog NetKet
    makes from ``out="prefix"``) are checkpointed and resumed too. Options
    are those of :class:`Checkpoint`.

        gs = nkserde.checkpointed(gs, "ckpt", every=50)
        gs.run(n_iter=1000, out="test")

    Each ``run()`` call on ``directory`` in the process gets its own
    subdirectory ``run-<i>``, numbered in call order whichever driver makes
    it: a script that runs a ground state and then a quench, both
    checkpointed into one directory, resumes each from its own checkpoints.

    The runs of one directory are a sequence: once a ``run()`` call is
    interrupted (``nk.callbacks.Timeout``, a callback's StopRun), the later
    ones of the process do not start (one line says so and ``run`` returns
    None), since each would begin from the unfinished state; running the
    script again resumes the interrupted run, then starts them. (A signal
    ends the program: see :class:`Checkpoint`'s ``signals``.)

    The driver keeps its type (``isinstance(gs, nk.driver.VMC)``) and can be
    saved with ``nkserde.save``; ``gs.last_checkpoint`` is the Checkpoint of
    its latest ``run``.
    """
    base = type(driver)
    if base.__dict__.get("_nkserde_wrapper", False):
        raise ValueError(f"{driver!r:.80} is already checkpointed")
    Checkpoint(Path(directory), **options)  # checks the options now
    directory = Path(directory)

    def run(self, *args, callback=None, **kwargs):
        index, blocked = PROCESS_RUNS.next_run(directory)
        if blocked is not None:
            say(
                f"{directory / f'run-{index}'}: not started: {blocked}, and this run would begin "
                "from its unfinished state; run the same script again: it resumes that run, then starts this one"
            )
            return None
        ckpt = Checkpoint(directory / f"run-{index}", **options)
        type(self).last_checkpoint = ckpt
        callbacks = [] if callback is None else list(callback) if isinstance(callback, (list, tuple)) else [callback]
        result = base.run(self, *args, callback=[*callbacks, ckpt], **kwargs)
        if ckpt.interrupted:
            PROCESS_RUNS.interrupted(
                directory, f"run-{index} was interrupted by {ckpt.interrupted} at step {self.step_count}"
            )
        return result

    run.__doc__ = base.run.__doc__
    # A subclass made for this driver alone: it stays a VMC (TDVP, ...) for
    # isinstance, NetKet and nkserde, and only run() differs.
    wrapper = type(
        base.__name__,
        (base,),
        {
            "run": run,
            "last_checkpoint": None,
            "checkpoint_directory": directory,
            "_nkserde_wrapper": True,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
        },
    )
    driver.__class__ = wrapper
    return driver
