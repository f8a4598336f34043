"""What a checkpoint holds of a run and how a resume puts it back.

A checkpoint holds the driver, the history of the run's loggers and the
state of its stateful callbacks (:func:`payload`), keyed so that a later
run of the script finds them again (:func:`keyed`). At the start of a run
(:func:`resume`) process 0 decides what to resume (lock, fingerprint,
newest checkpoint that verifies), every process loads it, and the driver,
loggers and callbacks get its numbers *in place*: the objects the script
holds are the ones restored. A run with no checkpoint of its own may start
from another run's variational state (``init_from``). Uses nkserde like a
user does: ``load_state_dict``, ``from_state_dict``, ``check_storable``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import jax

from .. import api
from ..caches import jax_executables as jax_cache
from .._log import say
from .._warnings import outside
from ..checkpoint_files import content as checkpoint_file
from ..checkpoint_files.directory import RunDirectory
from ..errors import NkserdeError, in_file
from ..netket import internals, loggers as netket_loggers, run_loop
from ..netket.callbacks import stateful
from ..placement import primary
from ..processes.jax_service import coordination_name, on_process_0
from . import fingerprint as run_fingerprint
from . import logger_histories
from .choice import choose_checkpoint, seen_by_every_process
from .options import CheckpointOptions, InitFrom
from .run_state import Run


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
        if not api.is_registered(logger):
            warnings.warn(
                f"nkserde: {type(logger).__name__} is not checkpointed: after a "
                "resume its output may hold the steps after the checkpoint twice",
                stacklevel=outside(),
            )
    stored_loggers = tuple(x for x in loggers if api.is_registered(x))
    # logger wrappers are handled through their loggers, in place
    stored_callbacks = tuple(
        c
        for c in callbacks
        if stateful(c) and not isinstance(c, checkpoints) and not hasattr(c, "logger") and not run_loop.is_logger(c)
    )
    return stored_loggers, stored_callbacks


def payload(driver, run: Run, completed: int, stopped: bool = False) -> dict:
    """What the checkpoint of step ``completed`` holds: the driver, the end
    of the run, whether it stopped for good, and process 0's loggers and
    callbacks (loggers write there only, timers start at slightly different
    times on each process)."""
    return checkpoint_file.payload(
        driver,
        completed,
        stopped,
        # the end the run was going to (a final stop is continued by a
        # rerun that asks for more)
        run_loop.target(driver),
        loggers=primary(keyed(run.loggers)),
        callbacks=primary(keyed(run.callbacks)),
    )


def check_storable(driver, run: Run, directory) -> None:
    """Fails now, not at the first checkpoint ``every`` steps in, if
    something in the run cannot be stored."""
    try:
        api.check_storable(payload(driver, run, driver.step_count))
    except NkserdeError as exc:
        raise in_file(exc, f"{directory}: this run cannot be checkpointed") from None


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
    state = chosen_here[1] if chosen_here else logger_histories.resolve(path, api.load_state_dict(path))
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
        say(f"{directory}: resumed {type(driver).__name__} from step {driver.step_count} ({path.name})")
    return driver.step_count


def start_from_another_run(driver, directory, init_from: InitFrom) -> None:
    """The variational state of ``init_from.source`` into the driver's, in
    place (every process reads it), taken as :func:`nkserde.load` takes it."""
    source = init_from.source
    if not source.exists():
        raise NkserdeError(f"{directory}: init_from={source}: no such file or directory")
    at = init_from.at if init_from.at is not None else _state_path(source)
    try:
        new = api.load(driver.state, source, at=at, strict=init_from.strict, rename=init_from.rename)
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
    new = api.from_state_dict(driver, state[checkpoint_file.DRIVER])
    completed = api.from_state_dict(0, state[checkpoint_file.COMPLETED_STEPS])
    restored = []
    for kind, live in ((checkpoint_file.LOGGERS, run.loggers), (checkpoint_file.CALLBACKS, run.callbacks)):
        stored = state[kind]
        for key, obj in keyed(live).items():
            if key in stored:
                restored.append((obj, api.from_state_dict(obj, stored[key])))
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
    cache = jax_cache.configured()
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
        root = api.info(source)["root_type"]
    except (NkserdeError, OSError):
        return None  # not an nkserde file (NetKet's own), or unreadable: load says which
    return "state" if root == checkpoint_file.ROOT_TYPE or "state" in api.stored_fields(root) else None


def _assign(live, restored, skip=()):
    """Makes ``live`` hold what ``restored`` holds, attribute by attribute,
    so references users keep to ``live`` see the restored numbers."""
    for name, value in vars(restored).items():
        if name not in skip:
            object.__setattr__(live, name, value)
