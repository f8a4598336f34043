"""A resume: which checkpoint a run takes up, and how it is put back.

At the start of a run (:func:`resume`) process 0 takes the directory's
lock, every process of the run checks that it sees it, and process 0
chooses what to resume (:func:`choose_checkpoint`: the resume mode, the
fingerprint, the newest checkpoint that verifies); every process loads it,
and the driver, its loggers and callbacks (found by the names
:func:`nkserde.checkpoint.run.keyed` gives them) get its numbers *in
place*: the objects the script holds are the ones restored. A run with no
checkpoint of its own may start from another run's variational state
(``init_from``). Uses nkserde like a user does: ``load_state_dict``,
``from_state_dict``.
"""

from __future__ import annotations

import json
import logging
import socket
import warnings
from pathlib import Path

import jax
import msgpack

from ...caches import jax_executables as jax_cache
from ..._log import say
from ..._warnings import outside
from ...checkpoint_files import content as checkpoint_file
from ...checkpoint_files.directory import RunDirectory
from ...errors import CorruptFileError, DistributedSaveError, NkserdeError, RunMismatchError, in_file
from ...format import bounded
from ...loading.file_info import info
from ...loading.load import from_state_dict, load, load_state_dict
from ...netket import internals, loggers as netket_loggers, run_loop
from ...netket.callbacks import stateful
from ...processes.jax_service import coordination_name, group, multi_process, on_process_0
from ...types.registry import is_registered, stored_fields
from .. import fingerprint as run_fingerprint
from . import logger_histories, saving
from ..options import CheckpointOptions, InitFrom
from ..run import Run, keyed


def begin(driver, files: RunDirectory, options: CheckpointOptions, end_step, *, checkpoints: type):
    """``(run, resumed_from)``: the :class:`Run` of a run() call of
    ``driver`` that starts, with its loggers and callbacks (but those of
    type ``checkpoints``) and its history log, resumed (:func:`resume`),
    checked to be storable; ``resumed_from``: the step it resumed from, or
    None for a fresh start."""
    run = Run(*run_objects(options.loggers, checkpoints=checkpoints), end_step, run_loop.target(driver))
    run.histories = logger_histories.HistoryAppender(files.path)
    resumed_from = resume(driver, run, files, options)
    saving.check_storable(driver, run, files.path)
    run.completed = run.last_saved = driver.step_count  # nothing of this run to save until it completes a step
    return run, resumed_from


def run_objects(extra_loggers, *, checkpoints: type) -> tuple[tuple, tuple]:
    """(loggers, stateful callbacks) of the run being started: those NetKet
    runs (``out=`` and ``callback=`` of ``run``) and ``extra_loggers``;
    callbacks of type ``checkpoints`` (the Checkpoint itself) are not
    stored. Loggers nkserde cannot store are named in a warning and left
    out."""
    callbacks = run_loop.running_callbacks()
    loggers = [c.logger for c in callbacks if hasattr(c, "logger")]
    loggers += [c for c in callbacks if run_loop.is_logger(c)]
    loggers = list({id(x): x for x in [*loggers, *extra_loggers]}.values())
    for logger in loggers:
        if not is_registered(logger):
            warnings.warn(
                f"nkserde: {type(logger).__name__} is not checkpointed: after a "
                "resume its output may hold the steps after the checkpoint twice",
                stacklevel=outside(),
            )
    stored_loggers = tuple(x for x in loggers if is_registered(x))
    # logger wrappers are handled through their loggers, in place
    stored_callbacks = tuple(
        c
        for c in callbacks
        if stateful(c) and not isinstance(c, checkpoints) and not hasattr(c, "logger") and not run_loop.is_logger(c)
    )
    return stored_loggers, stored_callbacks


def resume(driver, run: Run, files: RunDirectory, options: CheckpointOptions) -> int | None:
    """Decides on process 0 what to resume (lock, fingerprint, newest
    checkpoint that verifies, under ``options.resume``) and tells every
    process; then every process loads that checkpoint into the driver and
    the run's objects. Sets ``run.nothing_to_do`` if the run already
    stopped for good. Returns the step resumed, or None for a fresh start
    (from the variational state of ``options.init_from``, if given)."""
    directory = files.path
    current = run_fingerprint.fingerprint(driver)
    chosen_here = []  # process 0 keeps the state it verified

    def take_lock():
        files.lock.acquire()
        return files.lock.line

    def decide():
        choice = choose_checkpoint(files, options.resume, current, every=options.every)
        chosen_here.extend(choice or ())
        return str(choice[0]) if choice else None

    decisions = coordination_name("checkpoint:decisions", directory)
    failed, what = f"{directory}: process 0 could not start the run", f"the start of the run in {directory}"
    line = on_process_0(decisions, take_lock, failed, what=what)
    chosen = seen_by_every_process(files, line, decide, decisions, failed, what)
    if chosen is None:
        if options.init_from is not None:
            start_from_another_run(driver, directory, options.init_from)
        return None
    path = Path(chosen)
    state = chosen_here[1] if chosen_here else logger_histories.resolve(path, load_state_dict(path))
    try:
        restore(driver, run, state)
    except NkserdeError as exc:
        raise in_file(exc, path) from None
    run.nothing_to_do = bool(state.get(checkpoint_file.STOPPED)) and not run_loop.asks_for_more(
        driver, state.get(checkpoint_file.TARGET)
    )
    if run.nothing_to_do:
        say(
            f"{directory}: the run already stopped for good at step {driver.step_count} "
            f"({path.name}): nothing to do; ask for more steps (n_iter, T) to continue it"
        )
    else:
        moved = _platform_change(path)
        say(f"{directory}: resumed {type(driver).__name__} from step {driver.step_count} ({path.name}){moved}")
    return driver.step_count


def _platform_change(path: Path) -> str:
    """``"; written on cpu, continued on tpu: ..."`` when the checkpoint
    was written on another platform than this process computes on (its
    metadata says where; files of nkserde before it said nothing), else
    ``""``."""
    try:
        written_on = info(path).get("platform")
    except (NkserdeError, OSError):
        return ""
    here = jax.default_backend()
    if not isinstance(written_on, str) or written_on == here:
        return ""
    return (
        f"; written on {written_on}, continued on {here}: the continuation is not bit for bit "
        "what either platform alone computes"
    )


def start_from_another_run(driver, directory, init_from: InitFrom) -> None:
    """The variational state of ``init_from.source`` into the driver's, in
    place (every process reads it), taken as :func:`nkserde.load` takes it."""
    source = init_from.source
    if not source.exists():
        raise NkserdeError(f"{directory}: init_from={source}: no such file or directory")
    at = init_from.at if init_from.at is not None else _state_path(source)
    try:
        new = load(driver.state, source, at=at, strict=init_from.strict, rename=init_from.rename)
    except NkserdeError as exc:
        raise in_file(exc, f"{directory}: init_from={source}") from None
    _assign(driver.state, new)
    say(
        f"{directory}: no checkpoint of this run; starting from the variational state of {source}"
        + (f" (at {at!r})" if at else "")
    )


def restore(driver, run: Run, state) -> None:
    """The checkpoint ``state`` into the driver and the run's loggers and
    callbacks, in place. Everything is rebuilt (and any mismatch raised)
    before anything live is touched."""
    new = from_state_dict(driver, state[checkpoint_file.DRIVER])
    completed = from_state_dict(0, state[checkpoint_file.COMPLETED_STEPS])
    restored = []
    for kind, live in ((checkpoint_file.LOGGERS, run.loggers), (checkpoint_file.CALLBACKS, run.callbacks)):
        stored = state[kind]
        for key, obj in keyed(live).items():
            if key in stored:
                restored.append((obj, from_state_dict(obj, stored[key])))
            else:
                warnings.warn(f"nkserde: {key} is not in the checkpoint; it starts empty", stacklevel=outside())
    # In place: the script's own variational state object gets the numbers.
    _assign(driver.state, new.state)
    _assign(driver, new, skip=(internals.DRIVER_STATE_ATTRIBUTE,))
    internals.set_step_count(driver, completed)
    for live, new_obj in restored:
        _assign(live, new_obj)
        if jax.process_index() == 0:  # loggers write their files there only
            netket_loggers.resume_files(live, new_obj)
    if jax.process_index() == 0:  # the history log holds what this checkpoint holds
        run.histories.resumed(state)


def report_resume(run: Run, now: float, directory) -> None:
    """Once a resumed run has done two steps: how long the resume took
    and where the time went (load, the first step's compilation)."""
    times = run.resume_times
    times.append(now)  # [run start, resumed, then each step start]
    if len(times) < 5:
        return
    run.resume_times = None
    load, first, warm = times[1] - times[0], times[3] - times[2], times[4] - times[3]
    cache = jax_cache.in_use()
    where = f"compiled code cached in {cache}" if cache else "no compilation cache"
    say(
        f"{directory}: resumed in {times[3] - times[0]:.1f} s: loading {load:.1f} s, first step "
        f"{first:.1f} s ({where}), the step after it {warm:.1f} s"
    )


def _state_path(source: Path) -> str | None:
    """Where the variational state is in ``source``: ``"state"`` in a driver
    or Checkpoint file (or directory), the whole file otherwise (a saved
    variational state, a file NetKet wrote)."""
    if source.is_dir():
        return "state"
    try:
        root = info(source)["root_type"]
    except (NkserdeError, OSError):
        return None  # not an nkserde file (NetKet's own), or unreadable: load says which
    return "state" if root == checkpoint_file.ROOT_TYPE or "state" in stored_fields(root) else None


def _assign(live, restored, skip=()):
    """Makes ``live`` hold what ``restored`` holds, attribute by attribute,
    so references users keep to ``live`` see the restored numbers."""
    for name, value in vars(restored).items():
        if name not in skip:
            object.__setattr__(live, name, value)


# ------------------------------------------------------- process 0's choice


def seen_by_every_process(files: RunDirectory, line: str, decide, name: str, failed: str, what: str):
    """``decide()`` on process 0 once every process of the run has read the
    lock process 0 took (``line``); its result (JSON-able) on every process,
    in one round (about 3P requests). A process that does not see the lock
    (a checkpoint directory on a node's local disk, /tmp or $TMPDIR) fails
    the run's start on every process, naming the processes and their hosts,
    before anything else is written. ``name``, ``failed``, ``what``: as
    :func:`nkserde.processes.jax_service.on_process_0`'s. One process:
    just ``decide()``."""
    if not multi_process():
        return decide()
    try:
        seen = bounded.read_capped(files.lock.path, 4096, "lock file").decode(errors="replace").strip()
    except (OSError, NkserdeError):
        seen = ""

    def check_and_decide(messages: list[bytes]) -> bytes:
        blind = [(rank, host) for rank, (host, text) in enumerate(map(msgpack.unpackb, messages)) if text != line]
        if blind:
            who = ", ".join(f"process {rank} on host {host}" for rank, host in blind[:8])
            raise NkserdeError(
                f"{files.path}: {who} does not see the file process 0 created ({files.lock.path}): the checkpoint "
                "directory must be on a file system shared by all processes (not a node's local disk: /tmp, $TMPDIR)"
            )
        return json.dumps(decide()).encode()

    message = msgpack.packb([socket.gethostname(), seen])
    try:
        answer = group(name).round(message, check_and_decide, what=what)
    except DistributedSaveError as exc:
        if jax.process_index() == 0 or type(exc) is not DistributedSaveError:
            raise
        raise DistributedSaveError(f"{failed}: {exc}") from None
    return json.loads(answer)


def choose_checkpoint(files: RunDirectory, resume: str, current: dict, *, every) -> tuple[Path, dict] | None:
    """With the directory's lock held, applies the resume mode (``"never"``
    moves old checkpoints aside), compares the stored fingerprint with
    ``current`` (the run's), and returns (path, state dict) of the newest
    checkpoint that reads and verifies, or None for a fresh start (the
    fingerprint is then written). Damaged or unreadable checkpoints are
    skipped with a warning.

    A fingerprint of an older version that is still compared (version 2)
    is written anew at today's version once the run resumes.

    Raises RunMismatchError: the run changed (unless ``resume="force"``);
    NkserdeError: the lock is held, or ``resume="must"`` and nothing can be
    resumed."""
    directory = files.path
    if resume == "never" and files.has_history():
        files.move_aside()
    existing = files.steps()
    if not existing:
        if resume == "must":
            raise NkserdeError(f"{directory}: resume='must' but there is no checkpoint to resume")
        files.write_fingerprint(current)
        say(f"{directory}: no checkpoint, starting fresh (a checkpoint {every})")
        return None
    try:
        saved = files.read_fingerprint()
    except CorruptFileError as exc:
        if resume != "force":
            raise NkserdeError(f"{exc} (resume='force' resumes anyway and writes it anew)") from None
        say(f"resume='force': {exc}; not compared", logging.WARNING)
        saved = {}
    if saved:
        changes = run_fingerprint.changes(saved, current)
        if changes and resume != "force":
            raise RunMismatchError(
                f"{directory}: the run differs from the one that wrote these checkpoints "
                f"({files.fingerprint_path} -> this script):\n  " + "\n  ".join(changes) + "\n"
                "Run the script that wrote them, or pass resume='force' to resume them with these settings, "
                "or resume='never' to start fresh (the old checkpoints are moved to previous-<time>/)",
                directory=directory,
                changes=changes,
            )
        if changes:
            say(
                f"{directory}: resume='force': resuming despite {len(changes)} changes; the new settings apply",
                logging.WARNING,
            )
        if not run_fingerprint.comparable(saved):
            say(f"{directory}: fingerprint.json was written by an older nkserde; not compared")
    found = files.resume_file(_read_whole, warn=True)
    if found is not None:
        if resume == "force" or saved.get("fingerprint_version") != current.get("fingerprint_version"):
            files.write_fingerprint(current)  # an older version (compared or not) is replaced by today's
        return found
    if resume == "must":
        raise NkserdeError(f"{directory}: no checkpoint verifies; nothing to resume")
    files.write_fingerprint(current)
    return None


def _read_whole(path: Path) -> dict:
    """The checkpoint's state dict, read whole (every checksum verified) with
    its loggers' histories from the history log: the read
    :func:`nkserde.checkpoint_files.directory.check` stands for."""
    return logger_histories.resolve(path, load_state_dict(path))
