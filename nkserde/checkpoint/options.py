"""A Checkpoint's options, checked once, in one place: what
``Checkpoint(...)`` and ``checkpointed(...)`` take, as one frozen value.
The parts of a checkpointed run only read it.

    options = CheckpointOptions.parse(every="15min", keep=3, walltime=3600)
    options.every        # EveryDuration(seconds=900.0): a SavePolicy
    options.keep         # KeepLatest(n=3): a KeepPolicy
    options.job          # JobOptions(walltime=3600.0, requeue="auto", ...): job_control.py

Every string option is checked against one table (option_checks.CHOICES);
every error is a ValueError of one shape, ``"<option> must be <what it
may be>, got <what was given>"`` (option_checks.py). No files, no
process-wide state; NetKet only for the default ``final_stops``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .keep_policy import KeepPolicy, parse_keep
from .job.control import DEFAULT_SIGNALS, JobOptions
from .option_checks import one_of
from .save_policy import DEFAULT_BUDGET, SavePolicy, parse_every
from .run import FINAL_STOPS


@dataclass(frozen=True)
class InitFrom:
    """Where a run with no checkpoint of its own takes its variational
    state from (``init_from``), and how (``at``, ``strict``, ``rename``, as
    :func:`nkserde.load` takes them)."""

    source: Path
    at: str | None = None
    strict: bool = True
    rename: Any = None


@dataclass(frozen=True)
class CheckpointOptions:
    """Every option of a Checkpoint, checked (see :meth:`parse`)."""

    every: SavePolicy
    keep: KeepPolicy
    resume: str
    loggers: tuple
    async_save: bool
    final_stops: tuple
    on_write_error: str
    job: JobOptions
    compile_cache: Any
    init_from: InitFrom | None

    @classmethod
    def parse(
        cls,
        *,
        every=50,
        budget: float = DEFAULT_BUDGET,
        mtbf=None,
        keep=3,
        keep_every: int | None = None,
        resume: str = "auto",
        loggers=(),
        async_save: bool = True,
        signals=DEFAULT_SIGNALS,
        final_stops=FINAL_STOPS,
        on_write_error: str = "warn",
        requeue: str = "auto",
        requeue_on_error: int = 0,
        walltime="auto",
        compile_cache="auto",
        init_from=None,
        at: str | None = None,
        strict: bool = True,
        rename=None,
    ) -> CheckpointOptions:
        """The options as ``Checkpoint(directory, **options)`` takes them
        (its documentation says what each means), checked: ValueError
        naming the first that is wrong, what it may be and what it was."""
        return cls(
            every=parse_every(every, budget=budget, mtbf=mtbf),
            keep=parse_keep(keep, keep_every),
            resume=one_of("resume", resume),
            loggers=tuple(loggers),
            async_save=bool(async_save),
            final_stops=tuple(final_stops),
            on_write_error=one_of("on_write_error", on_write_error),
            job=JobOptions(walltime=walltime, requeue=requeue, requeue_on_error=requeue_on_error, signals=signals),
            compile_cache=compile_cache,
            init_from=None if init_from is None else InitFrom(Path(init_from), at, bool(strict), rename),
        )
