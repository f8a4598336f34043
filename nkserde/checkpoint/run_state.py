"""What a Checkpoint tracks while one ``run()`` call goes on: the objects it
stores, where the driver is in its step, what was saved, why the run
stopped, and when it checkpoints next. No NetKet, no files."""

from __future__ import annotations

from ..processes.jax_service import coordination_name, on_process_0
from .logger_histories import HistoryAppender
from .save_policy import SaveSchedule


class Run:
    """One ``run()`` call of a checkpointed driver, from ``on_run_start`` to
    its end. ``loggers`` and ``callbacks`` are stored and restored with the
    driver; ``end_step`` is where to stop a loop that would run past its
    end (NetKet 3.22), None where NetKet stops it."""

    def __init__(self, loggers: tuple, callbacks: tuple, end_step: int | None):
        self.loggers = loggers
        self.callbacks = callbacks
        self.end_step = end_step
        self.completed = 0  # steps the driver has completed
        self.last_saved: int | None = None  # step of the newest checkpoint submitted
        self.dirty_step: int | None = None  # the step whose update has begun, until it completes
        self.changing: int | None = None  # the step whose sampling has begun, until it completes
        self.saving = False  # a checkpoint is being taken in the run's thread
        self.nothing_to_do = False  # resumed the final checkpoint of a stopped run
        self.stop = None  # a StopFlag shared by the processes of a multi-process run
        self.stopped_by: int | None = None  # the signal (or WALLTIME) that stopped the run
        self.histories: HistoryAppender | None = None  # what the history log holds (process 0)
        self.schedule: SaveSchedule | None = None  # when to checkpoint (every)
        self.next_save: int | None = None  # several processes, every not in steps: process 0's decision
        self.snapshot_seconds = 0.0  # the run's own time in its last checkpoint's start
        self.resume_times: list | None = None  # a resumed run's times, until it is told (see restore.report_resume)

    def plan_saves(self, every, now: float, *, processes: int) -> None:
        """The run starts at step ``completed``, checkpointed as ``every``
        (a SavePolicy) says; with several processes and a policy of time,
        the first checkpoint comes after the first step (it measures one),
        then process 0 decides each next one (clocks differ between
        processes)."""
        self.schedule = SaveSchedule(every)
        self.schedule.started(now)
        if processes > 1 and not every.in_steps:
            self.next_save = self.completed + 1

    @property
    def unsaved(self) -> bool:
        """Whether the step completed last has no checkpoint yet."""
        return self.last_saved != self.completed

    def save_due(self, now: float) -> bool:
        """Whether the run checkpoints the step it completed, at ``now``."""
        if self.next_save is not None:  # several processes, a time interval: process 0's decision
            return self.completed >= self.next_save
        return self.schedule.due(self.completed, now)

    def agree_on_next_save(self, directory) -> None:
        """The step of the next checkpoint, decided by process 0 from its
        measured times, on every process: one round per checkpoint, none
        per step."""
        self.next_save = on_process_0(
            coordination_name("checkpoint:next-save", directory),
            lambda: self.schedule.next_step(self.completed),
            f"{directory}: process 0 could not schedule the next checkpoint",
            what=f"the checkpoint of step {self.completed} in {directory}",
        )
