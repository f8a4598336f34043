"""The Checkpoint callback: save as a run goes, resume when the same script
runs again.

    ckpt = nkserde.Checkpoint("ckpt", every=50)
    driver.run(1000, out=log, callback=ckpt)

First run: a checkpoint every ``every`` steps, at the end of the run, and
when the run stops early (StopRun, an exception, Ctrl-C, SIGTERM/SIGUSR1).
Same script again: ``on_run_start`` loads the newest checkpoint that
verifies, restores the driver *in place* (the user's variational state
object included), the history of every logger and the state of every
stateful callback of the run, and sets ``step_count`` (and, through the
integrator, ``t``). NetKet fixes the end of a run before ``on_run_start``,
so the same ``run(...)`` call then does only the remaining steps.

A run that stops early is either *interrupted* (a signal, an error,
``nk.callbacks.Timeout``, any callback that is not a convergence criterion):
the same script resumes it and finishes the remaining steps; or it stopped
*for good* (a convergence criterion: ``EarlyStopping``,
``ConvergenceStopping``, the types in ``final_stops``; TDVP reaching its
final time): the same script does nothing, and a larger ``n_iter`` (or
``T``) continues it from where it stopped.

This module uses nkserde like a user does: ``save_state_dict_steps``,
``load_state_dict``, ``from_state_dict``, ``check_storable``. Directory
layout: nkserde.directory.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import json
import logging
import os
import signal
import socket
import sys
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any

import jax
import netket as nk
import numpy as np
from netket.utils import struct

from . import api, directory as ckpt_dir, fingerprint as run_fingerprint, registry
from ._log import say
from .background import BackgroundWrite
from .distributed import coordination_name, on_process_0
from .errors import CorruptFileError, NkserdeError, UnsupportedNetKetError, UnsupportedVersionError
from .format.atomic import atomic_write, pid_alive
from .netket import loggers as netket_loggers, run_loop
from .netket.callbacks import stateful
from .parts import map_arrays, primary

RESUME_MODES = ("auto", "force", "never", "must")
# Stops that end a run for good: convergence criteria. Any other stop (a
# signal, Timeout, another callback) is an interruption the next run resumes.
FINAL_STOPS = (nk.callbacks.EarlyStopping, nk.callbacks.ConvergenceStopping)
class _NothingToDo(run_loop.RUN_FINISHED):
    """Raised by the Checkpoint when the checkpointed run already ended."""


class _ReachedTarget(run_loop.RUN_FINISHED):
    """Raised by the Checkpoint where NetKet's loop does not stop a resumed
    run at the end of the run() call itself (NetKet 3.22)."""


def _stateful(callback) -> bool:
    """Callbacks whose state nkserde stores (see nkserde.netket.callbacks)."""
    return stateful(callback) and not isinstance(callback, Checkpoint)


def _keyed(objects) -> dict:
    """Stable names for the run's loggers and callbacks, so a checkpoint
    matches them even if the script adds or removes one: the JsonLog's
    output prefix, else the type and its rank among objects of that type."""
    keyed, seen = {}, {}
    for obj in objects:
        name = type(obj).__name__
        prefix = getattr(obj, "_prefix", None)
        if isinstance(prefix, str):
            key = f"{name}:{prefix}"
        else:
            seen[name] = seen.get(name, -1) + 1
            key = f"{name}#{seen[name]}"
        keyed[key] = obj
    return keyed


fingerprint = run_fingerprint.fingerprint
fingerprint_changes = run_fingerprint.changes


class _Lock:
    """``.lock`` in the checkpoint directory: host and pid of the owner. A
    lock whose owner is a dead process of this host is stale and taken over."""

    def __init__(self, directory: Path):
        self.path = directory / ".lock"
        self.held = False

    def acquire(self):
        me = f"{socket.gethostname()} {os.getpid()}"
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    host, pid = self.path.read_text().split()
                except (OSError, ValueError):
                    host, pid = "", "0"  # unreadable or half written: treat as stale
                if host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid)):
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
                    continue
                if f"{host} {pid}" == me:
                    raise NkserdeError(f"{self.path.parent}: this process is already running "
                                       "a checkpointed run on this directory") from None
                raise NkserdeError(
                    f"{self.path.parent}: checkpoint directory is in use by process {pid} on host "
                    f"{host or '?'} (lock file {self.path}); two runs must not share a directory"
                ) from None
            with os.fdopen(fd, "w") as f:
                f.write(me)
            self.held = True
            return
        raise NkserdeError(f"{self.path}: could not take over a stale lock")

    def release(self):
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self.held = False


def _host_copy(state):
    """The state dict with a private copy of every array the run could change
    before the background write reads it. Read-only views of JAX buffers are
    kept as they are: a JAX array is immutable and the view keeps its buffer
    alive (NetKet donates no buffers), so copying them would only cost time.
    Everything backed by numpy memory (numpy sampler chains, logger
    histories) is copied."""
    return map_arrays(lambda a: a if _immutable_view(a) else np.array(a, copy=True), state)


def _immutable_view(a: np.ndarray) -> bool:
    if a.flags.writeable:
        return False
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.asarray(jax_array) on CPU: a view of its buffer
        base = base.obj
    # None: numpy owns the memory (a read-only flag can be lifted again);
    # bytearrays and mmaps can be written elsewhere. A JAX array cannot.
    return isinstance(base, jax.Array)


_PENDING: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _wait_for_pending_writes():
    for ckpt in list(_PENDING):
        ckpt.wait()


class Checkpoint(nk.callbacks.AbstractCallback):
    """Saves a driver as it runs and resumes it when the same script runs again.

    Args:
      directory: where the checkpoints go (created if needed).
      every: save every ``every`` completed steps (and always at the end).
      keep: how many of the newest checkpoints to keep.
      keep_every: also keep every checkpoint whose step is a multiple of it.
      resume: ``"auto"`` (resume if there is a checkpoint of the same run,
        refuse if the script changed), ``"force"`` (resume even if the
        fingerprint changed, where shapes allow), ``"never"`` (start fresh;
        old checkpoints are moved to ``previous-<time>/``, never deleted),
        ``"must"`` (fail if there is nothing to resume).
      loggers: loggers whose history to checkpoint besides those of the run
        (loggers passed as ``out=`` are found automatically).
      async_save: take a host snapshot of the state and write it from a
        background thread at the lowest CPU priority; at most one write is
        in flight, and the checkpoint of step k is on disk before step k+1
        ends: if the thread has not finished by then (a busy node), the
        run's thread writes the rest itself.
      signals: on these signals, finish the current step, checkpoint and
        stop the run cleanly (SLURM sends SIGTERM, or SIGUSR1 with
        ``--signal``).
      final_stops: callback types whose StopRun ends the run for good
        (convergence criteria); a StopRun of any other callback (e.g.
        ``nk.callbacks.Timeout``) is an interruption that the next run of
        the script resumes.

    After ``on_run_start``, ``resumed_from`` is the step the run resumed
    from, or None for a fresh start. After the run, ``interrupted`` names
    what interrupted it (a signal, e.g. ``"SIGTERM"``, or the type of the
    callback that stopped it, e.g. ``"Timeout"``), or is None when the run
    reached its end or a final stop.
    """

    directory: Path = struct.field(pytree_node=False, serialize=False)
    every: int = struct.field(pytree_node=False, serialize=False)
    keep: int = struct.field(pytree_node=False, serialize=False)
    keep_every: int | None = struct.field(pytree_node=False, serialize=False)
    resume: str = struct.field(pytree_node=False, serialize=False)
    loggers: tuple = struct.field(pytree_node=False, serialize=False)
    async_save: bool = struct.field(pytree_node=False, serialize=False)
    signals: tuple = struct.field(pytree_node=False, serialize=False)
    final_stops: tuple = struct.field(pytree_node=False, serialize=False)
    resumed_from: int | None = struct.field(pytree_node=False, serialize=False)
    interrupted: str | None = struct.field(pytree_node=False, serialize=False)
    _lock: Any = struct.field(pytree_node=False, serialize=False)
    _run_loggers: tuple = struct.field(pytree_node=False, serialize=False)
    _run_callbacks: tuple = struct.field(pytree_node=False, serialize=False)
    _completed: int = struct.field(pytree_node=False, serialize=False)
    _last_saved: int | None = struct.field(pytree_node=False, serialize=False)
    _signal_received: int | None = struct.field(pytree_node=False, serialize=False)
    _previous_handlers: dict = struct.field(pytree_node=False, serialize=False)
    _writer: Any = struct.field(pytree_node=False, serialize=False)
    _write_error: Any = struct.field(pytree_node=False, serialize=False)
    _write_lag: list = struct.field(pytree_node=False, serialize=False)
    _active: bool = struct.field(pytree_node=False, serialize=False)
    _dirty_step: int | None = struct.field(pytree_node=False, serialize=False)
    _nothing_to_do: bool = struct.field(pytree_node=False, serialize=False)
    _end_step: int | None = struct.field(pytree_node=False, serialize=False)
    _candidate: Any = struct.field(pytree_node=False, serialize=False)
    _interrupt_pending: bool = struct.field(pytree_node=False, serialize=False)

    def __init__(self, directory, *, every: int = 50, keep: int = 3, keep_every: int | None = None,
                 resume: str = "auto", loggers=(), async_save: bool = True,
                 signals=(signal.SIGTERM, signal.SIGUSR1), final_stops=FINAL_STOPS):
        if resume not in RESUME_MODES:
            raise ValueError(f"resume must be one of {RESUME_MODES}, got {resume!r}")
        if every < 1 or keep < 1:
            raise ValueError("every and keep must be >= 1")
        self.directory = Path(directory)
        self.every, self.keep, self.keep_every = int(every), int(keep), keep_every
        self.resume = resume
        self.loggers = tuple(loggers)
        self.async_save = bool(async_save)
        self.signals = tuple(signals)
        self.final_stops = tuple(final_stops)
        self.resumed_from = None
        self.interrupted = None
        self._lock = _Lock(self.directory)
        self._run_loggers, self._run_callbacks = (), ()
        self._completed, self._last_saved = 0, None
        self._signal_received, self._previous_handlers = None, {}
        self._writer, self._write_error = None, None
        self._write_lag = []  # (steps the run went on, seconds) from snapshot to file, per background write
        self._active = False
        self._dirty_step = None  # the step whose update has begun, until it completes
        self._nothing_to_do = False  # resumed the final checkpoint of a stopped run
        self._end_step = None  # where to stop a loop that would run past its end (NetKet 3.22)
        self._candidate = None  # (path, state dict) process 0 verified at start
        self._interrupt_pending = False  # Ctrl-C deferred to the end of the step

    @property
    def callback_order(self) -> int:
        # First: resume before the loggers open (and, in write mode,
        # truncate) their files in their own on_run_start. A step is saved at
        # the start of the next one, when every callback has finished it.
        return -1000

    # ------------------------------------------------------------------ files

    def steps(self) -> list[int]:
        """Steps that have a checkpoint file, oldest first."""
        return ckpt_dir.steps(self.directory)

    def path(self, step: int) -> Path:
        return ckpt_dir.step_path(self.directory, step)

    def latest(self) -> Path | None:
        """Path of the newest checkpoint that verifies, or None."""
        return ckpt_dir.latest(self.directory)

    def _retain(self, newest: int):
        steps = [s for s in self.steps() if s <= newest]
        keep = set(steps[-self.keep:])
        if self.keep_every:
            keep |= {s for s in steps if s % self.keep_every == 0}
        for step in steps:
            if step not in keep:
                with contextlib.suppress(FileNotFoundError):
                    self.path(step).unlink()

    # ------------------------------------------------------------------ hooks

    def __call__(self, step, log_data, driver):
        # NetKet's older run loop (every driver of NetKet 3.21, the dynamics
        # drivers of 3.22) calls callbacks as functions after each step: too
        # late to resume, and without the hooks a checkpoint needs
        raise UnsupportedNetKetError(
            f"nkserde.Checkpoint: {type(driver).__name__}.run of NetKet {nk.__version__} calls "
            f"callbacks as functions, without NetKet's callback hooks (NetKet >= 3.23); save "
            f"and load the driver with nkserde.save / nkserde.load instead")

    def on_run_start(self, step, driver):
        self._end_step = run_loop.fix_target_step(driver) if run_loop.target(driver) is None else None
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            callbacks = run_loop.running_callbacks()
            loggers = [c.logger for c in callbacks if hasattr(c, "logger")]
            loggers += [c for c in callbacks if run_loop.is_logger(c)]
            loggers = list({id(x): x for x in [*loggers, *self.loggers]}.values())
            for logger in loggers:
                if registry.lookup(type(logger)) is None:
                    warnings.warn(f"nkserde: {type(logger).__name__} is not checkpointed: after a "
                                  "resume its output may hold the steps after the checkpoint twice",
                                  stacklevel=3)
            self._run_loggers = tuple(x for x in loggers if registry.lookup(type(x)) is not None)
            # logger wrappers are handled through their loggers, in place
            self._run_callbacks = tuple(c for c in callbacks if _stateful(c)
                                        and not hasattr(c, "logger") and not run_loop.is_logger(c))
            self.resumed_from, self.interrupted, self._dirty_step = None, None, None
            self._interrupt_pending = False
            self._nothing_to_do = False
            self._start(driver)
            self._check_storable(driver)
            # nothing of this run to save until it completes a step
            self._completed = self._last_saved = driver.step_count
            self._install_signal_handlers()
            self._active = True
        except BaseException:
            self._lock.release()
            raise

    def before_parameter_update(self, step, log_data, driver):
        self._dirty_step = driver.step_count

    def on_step_end(self, step, log_data, driver):
        # The checkpoint taken at this step's start must be on disk before
        # the step ends: a background write that lags (a busy node starves
        # its low-priority thread) is finished here, at the run's priority.
        self.wait()

    def on_step_start(self, step, log_data, driver):
        if not self._active:
            return
        # Every callback has finished the previous step and NetKet has
        # counted it: the driver is exactly `step_count` steps in.
        self._dirty_step = None
        self._completed = driver.step_count
        if self._end_step is not None and driver.step_count >= self._end_step:
            # NetKet 3.22's loop, resumed, would run on past the end (see
            # _fix_target_step)
            raise _ReachedTarget(f"step {driver.step_count}, the end of this run() call")
        if self._nothing_to_do:  # raised here, once every callback has started
            raise _NothingToDo(
                f"the checkpointed run already stopped at step {driver.step_count}: nothing to do")
        if self._interrupt_pending:  # Ctrl-C during the end of the step just completed
            self._interrupt_pending = False
            if self._last_saved != self._completed:
                self._save(driver, asynchronous=False)
            raise KeyboardInterrupt
        if _multi_process():
            # stop together: a signal may reach the processes at different steps
            received = self._comm("signals").allgather(str(self._signal_received or 0).encode())
            self._signal_received = self._signal_received or max(int(b) for b in received) or None
        if self._signal_received is not None:
            self.interrupted = signal.Signals(self._signal_received).name
            if self._last_saved != self._completed:
                self._save(driver, asynchronous=False)
            raise nk.callbacks.StopRun(
                f"received {self.interrupted}: checkpointed step {self._completed} in {self.directory}")
        if self._completed % self.every == 0 and self._last_saved != self._completed:
            self._save(driver, asynchronous=self.async_save)

    def on_run_end(self, step, driver):
        if not self._active:
            return
        try:
            # A StopRun raised in on_step_end ends the run after that step's
            # update and before NetKet counts it. (After a normal last step,
            # or a StopRun at a step's start, NetKet has counted every step.)
            stop = sys.exc_info()[1]  # NetKet calls on_run_end while handling it
            after_update = self._dirty_step is not None and self._dirty_step == driver.step_count
            final, raiser = self._classify_stop(stop)
            stopped = after_update and final
            self._completed = driver.step_count
            if after_update and not final:
                # An interruption (Timeout, ...): the step is complete but for
                # NetKet's count; count it (the driver the script holds says
                # so too) and the next run continues with the step after it.
                self._completed += 1
                driver._step_count = self._completed
            if not final:
                self.interrupted = self.interrupted or raiser
            if self._last_saved != self._completed or stopped:
                # a final stop keeps NetKet's count, and the checkpoint says
                # the run stopped there, so a rerun of the same script stops too
                self._save(driver, asynchronous=False, stopped=stopped)
            self.wait()
            if self.interrupted:
                say(f"{self.directory}: interrupted by {self.interrupted} after step {self._completed}; "
                    "running the same script again resumes from there")
        finally:
            self._finish()
        if self._interrupt_pending:  # Ctrl-C during the last step: saved, now raise it
            self._interrupt_pending = False
            raise KeyboardInterrupt

    def on_run_error(self, step, error, driver):
        # A run that failed to start (e.g. a fingerprint mismatch raised in
        # on_run_start) has nothing of its own to save.
        if not self._active:
            return
        try:
            if _multi_process():
                # An error need not strike every process at the same step (or
                # at all): a save needs all of them, so none is attempted.
                warnings.warn(f"nkserde: the run failed; the newest checkpoint is step "
                              f"{self._last_saved}", stacklevel=2)
            elif self._dirty_step is not None:
                # The error struck after this step began updating parameters
                # and before every callback finished it: the driver is
                # between two steps and cannot be saved as either.
                warnings.warn(
                    f"nkserde: the run failed while step {self._dirty_step} was being applied; "
                    f"the newest checkpoint is step {self._last_saved}", stacklevel=2)
            else:
                self._completed = driver.step_count
                if self._last_saved != self._completed:
                    self._save(driver, asynchronous=False)
            self.wait()
        except Exception as exc:  # never mask the error that stopped the run
            warnings.warn(f"nkserde: could not checkpoint after the error: {exc}", stacklevel=2)
        finally:
            self._finish(raise_write_error=False)

    def _classify_stop(self, stop) -> tuple[bool, str | None]:
        """(is it final, the name of what raised it) for the StopRun being
        handled (None: the run reached its end)."""
        if not isinstance(stop, nk.callbacks.StopRun):
            return True, None
        if isinstance(stop, (_NothingToDo, _ReachedTarget)) or run_loop.reached_end(stop):
            return True, None
        raiser, tb = None, stop.__traceback__
        while tb is not None:  # the innermost callback on the stack raised it
            owner = tb.tb_frame.f_locals.get("self")
            if isinstance(owner, nk.callbacks.AbstractCallback):
                raiser = owner
            tb = tb.tb_next
        if isinstance(raiser, run_loop.REACHED_END):
            return True, None
        if isinstance(raiser, self.final_stops):
            return True, type(raiser).__name__
        return False, type(raiser).__name__ if raiser is not None else "StopRun"

    # ----------------------------------------------------------------- resume

    def _payload(self, driver, completed: int, stopped: bool = False) -> dict:
        return {
            "driver": driver,
            "completed_steps": completed,
            "stopped": stopped,
            # the end the run was going to (a final stop is continued by a
            # rerun that asks for more)
            "target": run_loop.target(driver),
            # process 0's record: loggers write there only, timers start
            # at slightly different times on each process
            "loggers": primary(_keyed(self._run_loggers)),
            "callbacks": primary(_keyed(self._run_callbacks)),
        }

    def _start(self, driver):
        """Decides on process 0 what to resume (lock, fingerprint, newest
        checkpoint that verifies) and tells every process; then every
        process loads that checkpoint."""
        current = fingerprint(driver)
        self._candidate = None
        chosen = on_process_0(coordination_name("checkpoint:decisions", self.directory),
                              lambda: self._choose(current),
                              f"{self.directory}: process 0 could not start the run")
        if chosen is None:
            return
        path = Path(chosen)
        state = self._candidate[1] if self._candidate else api.load_state_dict(path)
        self._candidate = None
        try:
            self._restore(driver, state)
        except NkserdeError as exc:
            raise type(exc)(f"{path}: {exc}") from None
        self.resumed_from = driver.step_count
        self._nothing_to_do = bool(state.get("stopped")) and not run_loop.asks_for_more(driver, state.get("target"))
        if self._nothing_to_do:
            say(f"{self.directory}: the run already stopped for good at step {driver.step_count} "
                f"({path.name}): nothing to do; ask for more steps (n_iter, T) to continue it")
        else:
            say(f"{self.directory}: resumed {type(driver).__name__} from step {driver.step_count} "
                f"({path.name})")

    def _check_storable(self, driver):
        """Fails now, not at the first checkpoint ``every`` steps in, if
        something in the run cannot be stored."""
        try:
            api.check_storable(self._payload(driver, driver.step_count))
        except NkserdeError as exc:
            raise type(exc)(f"{self.directory}: this run cannot be checkpointed: {exc}") from None

    def _choose(self, current: dict) -> str | None:
        """Process 0: takes the lock, checks the fingerprint, returns the
        path of the checkpoint to resume (None: start fresh)."""
        self._lock.acquire()
        fp_path = self.directory / "fingerprint.json"
        existing = self.steps()
        if self.resume == "never" and (existing or fp_path.exists()):
            self._move_aside()
            existing = []
        if not existing:
            if self.resume == "must":
                raise NkserdeError(f"{self.directory}: resume='must' but there is no checkpoint to resume")
            self._write_fingerprint(current)
            say(f"{self.directory}: no checkpoint, starting fresh (a checkpoint every {self.every} steps)")
            return None
        saved = json.loads(fp_path.read_text()) if fp_path.exists() else {}
        if saved:
            changes = fingerprint_changes(saved, current)
            if changes and self.resume != "force":
                raise NkserdeError(
                    f"{self.directory}: the run differs from the one that wrote these checkpoints "
                    "(use resume='force' to load anyway, or resume='never' to start fresh):\n  "
                    + "\n  ".join(changes))
            if changes:
                say(f"{self.directory}: resume='force': resuming despite {len(changes)} changes; "
                    "the new settings apply", logging.WARNING)
            if not run_fingerprint.comparable(saved):
                say(f"{self.directory}: fingerprint.json was written by an older nkserde; not compared")
        for step in reversed(existing):
            path = self.path(step)
            try:
                # read whole (and kept for this process's restore): verified
                self._candidate = (path, api.load_state_dict(path))
            except (CorruptFileError, UnsupportedVersionError, OSError) as exc:
                warnings.warn(f"nkserde: skipping checkpoint {path}: {exc}", stacklevel=2)
                continue
            if self.resume == "force" or not run_fingerprint.comparable(saved):
                self._write_fingerprint(current)
            return str(path)
        if self.resume == "must":
            raise NkserdeError(f"{self.directory}: no checkpoint verifies; nothing to resume")
        self._write_fingerprint(current)
        return None

    def _comm(self, purpose: str):
        from .distributed import JaxCommunicator, coordination_name

        return JaxCommunicator(coordination_name(f"checkpoint:{purpose}", self.directory))

    def _restore(self, driver, state):
        # Everything is rebuilt (and any mismatch raised) before anything
        # live is touched.
        new = api.from_state_dict(driver, state["driver"])
        completed = api.from_state_dict(0, state["completed_steps"])
        restored = []
        for kind, live in (("loggers", self._run_loggers), ("callbacks", self._run_callbacks)):
            stored = state[kind]
            for key, obj in _keyed(live).items():
                if key in stored:
                    restored.append((obj, api.from_state_dict(obj, stored[key])))
                else:
                    warnings.warn(f"nkserde: {key} is not in the checkpoint; it starts empty",
                                  stacklevel=3)
        # In place: the script's own variational state object gets the numbers.
        _assign(driver.state, new.state)
        _assign(driver, new, skip=("_variational_state",))
        driver._step_count = completed
        for live, new_obj in restored:
            _assign(live, new_obj)
            if jax.process_index() == 0:  # loggers write their files there only
                netket_loggers.resume_files(live, new_obj)

    def _write_fingerprint(self, fp: dict):
        with atomic_write(self.directory / "fingerprint.json") as f:
            f.write(json.dumps(fp, indent=1, sort_keys=True).encode())

    def _move_aside(self):
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        target = self.directory / f"previous-{stamp}"
        target.mkdir()
        for p in self.directory.iterdir():
            if ckpt_dir.STEP_FILE.match(p.name) or p.name == "fingerprint.json":
                p.rename(target / p.name)

    # ------------------------------------------------------------------- save

    def _save(self, driver, *, asynchronous: bool, stopped: bool = False):
        completed = self._completed
        self._raise_write_error()
        state = api.state_dict(self._payload(driver, completed, stopped))
        path = self.path(completed)
        if asynchronous:
            state = _host_copy(state)
        self.wait()  # at most one write in flight
        writer = BackgroundWrite(self._write_steps(state, path, completed), name="nkserde-checkpoint")
        self._writer = writer
        if asynchronous:
            _PENDING.add(self)
            writer.start()
        else:
            self.wait()
            self._raise_write_error()
        self._last_saved = completed

    def _write_steps(self, state, path, completed):
        """The steps of writing one checkpoint (see BackgroundWrite)."""
        yield from api.save_state_dict_steps(state, path, root_type="checkpoint")  # every process together
        if jax.process_index() == 0:  # directory upkeep is process 0's
            yield from api.verify_steps(path)  # only a verified checkpoint may retire older ones
            self._retain(completed)

    def wait(self):
        """Blocks until the write in flight (if any) has finished; whatever
        the background thread has not done yet, this thread does."""
        writer = self._writer
        if writer is None:
            return
        if not writer.done:
            writer.finish()
        self._writer = None
        if writer.error is not None:
            self._write_error = writer.error
        if writer.started:
            self._write_lag.append((writer.steps_in_caller, writer.seconds))

    def _raise_write_error(self):
        if self._write_error is not None:
            exc, self._write_error = self._write_error, None
            raise NkserdeError(f"{self.directory}: writing a checkpoint failed: {exc}") from exc

    # ---------------------------------------------------------------- signals

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            self._signal_received = signum
            previous = self._previous_handlers.get(signum)
            if callable(previous):
                previous(signum, frame)

        for signum in self.signals:
            self._previous_handlers[signum] = signal.getsignal(signum)
            signal.signal(signum, handler)

        previous_sigint = signal.getsignal(signal.SIGINT)
        if (signal.SIGINT in self.signals or _multi_process()
                or previous_sigint is not signal.default_int_handler):
            return  # a handler of the user's (or of another tool) is left alone

        def on_sigint(signum, frame):
            # Ctrl-C between a step's parameter update and the end of its
            # callbacks would leave a driver that is neither the last
            # completed step nor the next one: finish the step, checkpoint
            # it, then raise (on_step_start/on_run_end). Elsewhere: at once.
            if self._dirty_step is None:
                raise KeyboardInterrupt
            self._interrupt_pending = True

        self._previous_handlers[signal.SIGINT] = previous_sigint
        signal.signal(signal.SIGINT, on_sigint)

    def _finish(self, raise_write_error=True):
        self._active = False
        if self._write_error is not None and not raise_write_error:
            say(f"{self.directory}: writing a checkpoint failed: {self._write_error}", logging.WARNING)
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous_handlers.items():
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous_handlers = {}
        self._signal_received = None
        self._lock.release()
        if raise_write_error:
            self._raise_write_error()


def _multi_process() -> bool:
    return jax.process_count() > 1


def _assign(live, restored, skip=()):
    """Makes ``live`` hold what ``restored`` holds, attribute by attribute,
    so references users keep to ``live`` see the restored numbers."""
    for name, value in vars(restored).items():
        if name not in skip:
            object.__setattr__(live, name, value)


# run() calls made so far in this process per checkpointed(...) directory
_RUN_CALLS: dict[str, int] = {}


def reset_run_numbering() -> None:
    """Numbers the next ``run()`` calls of checkpointed drivers from
    ``run-0`` again, as in a new process: for tests and notebooks that
    restart a script within one Python process."""
    _RUN_CALLS.clear()


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
        key = str(directory.resolve())
        index = _RUN_CALLS.get(key, 0)
        _RUN_CALLS[key] = index + 1
        ckpt = Checkpoint(directory / f"run-{index}", **options)
        type(self).last_checkpoint = ckpt
        callbacks = [] if callback is None else list(callback) if isinstance(callback, (list, tuple)) \
            else [callback]
        return base.run(self, *args, callback=[*callbacks, ckpt], **kwargs)

    run.__doc__ = base.run.__doc__
    # A subclass made for this driver alone: it stays a VMC (TDVP, ...) for
    # isinstance, NetKet and nkserde, and only run() differs.
    wrapper = type(base.__name__, (base,), {
        "run": run, "last_checkpoint": None, "checkpoint_directory": directory,
        "_nkserde_wrapper": True, "__module__": base.__module__, "__qualname__": base.__qualname__,
        "__doc__": base.__doc__})
    driver.__class__ = wrapper
    return driver
