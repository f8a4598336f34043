"""``checkpointed(driver, directory)``: every ``run`` of the driver
checkpointed, one ``run-<i>`` subdirectory per run() call.

The driver gets a class of its own, made for it alone: a subclass of its
class whose ``run`` adds the Checkpoint. Not an attribute on the driver
(``driver.run = ...``): the run's fingerprint reads the driver's fields
and calls the functions it finds there on fixed inputs, so it would start
a nested ``run()`` (numbering runs out of order, and letting a run follow
an interrupted one); a copy of the driver (``copy.copy``,
``Pytree.replace``) would keep a ``run`` bound to the original. Not a
wrapper object around the driver: ``isinstance(gs, nk.driver.VMC)`` would
be False and ``nkserde.save(gs)`` would find no registration (it looks
registrations up by type).

A subclass keeps the driver's type for all of them (registrations are
found along the class's ``__mro__``; the fingerprint names the class it
wraps) and adds no field; its ``run`` is the only difference. What the
driver's runs leave (the latest Checkpoint) is kept in a
:class:`Checkpointed` record the subclass holds, made once here: the
class is never changed after.
"""

from __future__ import annotations

from pathlib import Path

from .._log import say
from ..checkpoint_files.directory import unusable
from .callback import Checkpoint
from .options import CheckpointOptions, signature
from .process_runs import PROCESS_RUNS

# the attribute of a class checkpointed() made (run_fingerprint names the class it wraps)
WRAPPER_MARK = "_nkserde_wrapper"


class Checkpointed:
    """What ``checkpointed(driver, directory, **options)`` gave one driver:
    where its runs are checkpointed, with which options (the keywords of
    :class:`Checkpoint`, checked), and the Checkpoint of its latest run."""

    def __init__(self, directory: Path, options: dict):
        self.directory = directory
        self.options = options
        self.last: Checkpoint | None = None

    def run(self, driver, base_run, *args, callback=None, **kwargs):
        """``base_run(driver, ...)`` with a Checkpoint in ``run-<i>``, unless
        an earlier run() call of this directory in this process was
        interrupted."""
        index, blocked = PROCESS_RUNS.next_run(self.directory)
        if blocked is not None:
            say(
                f"{self.directory / f'run-{index}'}: not started: {blocked}, and this run would begin "
                "from its unfinished state; run the same script again: it resumes that run, then starts this one"
            )
            return None
        ckpt = self.last = Checkpoint(self.directory / f"run-{index}", **self.options)
        callbacks = [] if callback is None else list(callback) if isinstance(callback, (list, tuple)) else [callback]
        result = base_run(driver, *args, callback=[*callbacks, ckpt], **kwargs)
        if ckpt.interrupted:
            PROCESS_RUNS.interrupted(
                self.directory, f"run-{index} was interrupted by {ckpt.interrupted} at step {driver.step_count}"
            )
        return result


def checkpointed(driver, directory, **options):
    """The driver itself, with every later ``run`` checkpointed and resumed
    in ``directory``; the loggers of each run (including the JsonLog NetKet
    makes from ``out="prefix"``) are checkpointed and resumed too. Options
    are those of :class:`Checkpoint`, checked now.

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
    ends the program: see :class:`Checkpoint`'s ``job``.)

    The driver keeps its type (``isinstance(gs, nk.driver.VMC)``) and can be
    saved with ``nkserde.save``; ``gs.last_checkpoint`` is the Checkpoint of
    its latest ``run``.
    """
    base = type(driver)
    if base.__dict__.get(WRAPPER_MARK, False):
        raise ValueError(f"{driver!r:.80} is already checkpointed")
    checked = CheckpointOptions.given(**options)  # checked now (and warned about), once for every run
    directory = Path(directory)
    problem = unusable(directory)  # a file in its place, a read-only file system: say so now
    if problem is not None:
        raise problem
    record = Checkpointed(directory, {f: getattr(checked, f) for f in checked.__dataclass_fields__})

    def run(self, *args, **kwargs):
        return record.run(self, base.run, *args, **kwargs)

    run.__doc__ = base.run.__doc__
    driver.__class__ = type(
        base.__name__,
        (base,),
        {
            "run": run,
            "last_checkpoint": property(lambda self: record.last, doc="The Checkpoint of the latest run()."),
            "checkpoint_directory": directory,
            "_nkserde_checkpointed": record,
            WRAPPER_MARK: True,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
        },
    )
    return driver


checkpointed.__signature__ = signature("driver", "directory")  # the options, as Checkpoint's
