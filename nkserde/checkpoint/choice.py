"""Which checkpoint a run resumes: process 0's decision at the start of a
run, after it took the directory's lock and every process of the run saw
that lock. Knows files and fingerprints (no NetKet objects)."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import jax
import msgpack

from .. import api
from .._log import say
from ..checkpoint_files.directory import RunDirectory
from ..errors import CorruptFileError, DistributedSaveError, NkserdeError, RunMismatchError
from ..format import bounded
from ..processes.jax_service import group, multi_process
from . import fingerprint as run_fingerprint
from . import logger_histories


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
    return logger_histories.resolve(path, api.load_state_dict(path))
