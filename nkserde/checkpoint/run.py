"""One ``run()`` call of a checkpointed driver: what the Checkpoint tracks
while it goes on (the objects it stores, under names a later run finds
again; where the driver is in its step; what was saved; when it
checkpoints next), and how it ended (an interruption the same script
resumes, or a final stop it does not). NetKet's run loop through
nkserde.netket.run_loop; no files."""

from __future__ import annotations

from dataclasses import dataclass

import netket as nk

from ..netket import internals, run_loop
from ..processes.jax_service import coordination_name, on_process_0
from .process_runs import PROCESS_RUNS
from .save_policy import SaveSchedule
from .step_times import StepTimes


class Run:
    """One ``run()`` call of a checkpointed driver, from ``on_run_start`` to
    its end. ``loggers`` and ``callbacks`` are stored and restored with the
    driver; ``end_step`` is where to stop a loop that would run past its
    end (NetKet 3.22), None where NetKet stops it."""

    def __init__(self, loggers: tuple, callbacks: tuple, end_step: int | None, target=None):
        self.loggers = loggers
        self.callbacks = callbacks
        self.end_step = end_step
        self.target = target  # where this run() call ends (steps; TDVP: its final time), as NetKet fixed it
        self.completed = 0  # steps the driver has completed
        self.last_saved: int | None = None  # step of the newest checkpoint submitted
        self.dirty_step: int | None = None  # the step whose update has begun, until it completes
        self.changing: int | None = None  # the step whose sampling has begun, until it completes
        self.saving = False  # a checkpoint is being taken in the run's thread
        self.nothing_to_do = False  # resumed the final checkpoint of a stopped run
        self.stopped_by: int | None = None  # the signal (or WALLTIME) that stopped the run
        self.histories = None  # what the history log holds (process 0): persist.logger_histories.HistoryAppender
        self.steps = StepTimes()  # how long its steps take: read by the save schedule and the walltime guard
        self.schedule: SaveSchedule | None = None  # when to checkpoint (every)
        self.next_save: int | None = None  # several processes, every not in steps: process 0's decision
        self.snapshot_seconds = 0.0  # the run's own time in its last checkpoint's start
        self.resume_times: list | None = None  # a resumed run's times, until it is told (see restore.report_resume)

    def at_step_start(self, step_count: int) -> bool:
        """A step of the driver starts at ``step_count``: whether it is a
        step boundary, where every callback has finished the previous step
        and NetKet has counted it (the driver is exactly ``step_count``
        steps in); not where a rejected attempt of the same step starts
        again (adaptive integrators: the driver is mid-step)."""
        if self.changing is not None and step_count == self.changing:
            return False
        self.changing = self.dirty_step = None
        if step_count > self.completed:
            PROCESS_RUNS.count_step()
        self.completed = step_count
        return True

    def check_end(self) -> None:
        """Raises the stop of a run() call that has nothing more to do at
        this step boundary (once every callback has started): its end,
        where NetKet 3.22's loop, resumed, would run on past it (see
        run_loop.fix_target_step), or a resume of a run that had stopped
        for good."""
        if self.end_step is not None and self.completed >= self.end_step:
            raise ReachedTarget(f"step {self.completed}, the end of this run() call")
        if self.nothing_to_do:
            raise NothingToDo(f"the checkpointed run already stopped at step {self.completed}: nothing to do")

    def plan_saves(self, every, now: float, *, processes: int) -> None:
        """The run starts at step ``completed``, checkpointed as ``every``
        (a SavePolicy) says; with several processes and a policy of time,
        the first checkpoint comes after the first step (it measures one),
        then process 0 decides each next one (clocks differ between
        processes)."""
        self.schedule = SaveSchedule(every, self.steps)
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

    def checkpoint_taken(self, now: float, directory) -> None:
        """The run took a checkpoint of its schedule at ``now``: the next
        one is planned from there (with several processes and a policy of
        time, decided by process 0)."""
        self.schedule.taken(now)
        if self.next_save is not None:
            self.agree_on_next_save(directory)

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


def keyed(objects) -> dict:
    """Stable names for the run's loggers and callbacks, so a checkpoint
    matches them even if the script adds or removes one: the JsonLog's
    output prefix, else the type and its rank among objects of that type."""
    keyed, seen = {}, {}
    for obj in objects:
        name = type(obj).__name__
        prefix = internals.output_prefix(obj)
        if prefix is not None:
            key = f"{name}:{prefix}"
        else:
            seen[name] = seen.get(name, -1) + 1
            key = f"{name}#{seen[name]}"
        keyed[key] = obj
    return keyed


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
    did), ``completed`` (the steps it completed), ``mid_step`` (it stopped
    after a step began changing the driver and before its update: half a
    step, never checkpointed) and ``stopped`` (a final stop after a step's
    update: the checkpoint says the run stopped there, so a rerun of the
    same script stops too)."""

    final: bool
    raiser: str | None
    completed: int
    mid_step: bool
    stopped: bool


def how_it_ended(run: Run, driver, stop: BaseException | None, final_stops=FINAL_STOPS) -> RunEnd:
    """How ``run`` ended on ``stop`` (the exception NetKet is handling, if
    any). An interruption after a step's update (a StopRun in
    ``on_step_end``, before NetKet counts the step) completed that step:
    ``completed`` counts it, one more than the driver's ``step_count``,
    which the caller sets, so that the next run continues with the step
    after it. (After a normal last step, or a StopRun at a step's start,
    NetKet has counted every step.)"""
    after_update = run.dirty_step is not None and run.dirty_step == driver.step_count
    final, raiser = classify_stop(stop, final_stops)
    completed = driver.step_count + (1 if after_update and not final else 0)
    mid_step = run.changing == driver.step_count and not after_update
    return RunEnd(final, raiser, completed, mid_step, stopped=after_update and final)
