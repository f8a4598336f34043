"""A checkpoint directory on disk: how its files are named and found, its
run fingerprint file, moving checkpoints aside and retiring them (its lock
is nkserde.checkpoint_files.lock's). The one owner of that layout. Knows files only (no NetKet, no registry;
what is *in* a checkpoint file is nkserde.checkpoint_files.content's).

    ckpt/                      a Checkpoint's directory
      step-0000000015.nks      one checkpoint: 15 completed steps
      history-000001.nkh       the loggers' histories the checkpoints refer to
                               (nkserde.format.history_log; nkserde.checkpoint.persist.logger_histories)
      fingerprint.json         what defines the run (nkserde.checkpoint.fingerprint)
      .lock                    while a run uses the directory (nkserde.checkpoint_files.lock)
      error-requeues           how often SLURM jobs of the run were requeued after it failed
      previous-<time>/         checkpoints moved aside by resume="never"
    ckpt/                      a checkpointed(...) directory
      run-0/ run-1/ ...        one Checkpoint directory per run() call
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import re
import warnings
from pathlib import Path

from . import content as checkpoint_file
from .._warnings import outside
from .. import format as fileformat
from ..errors import CheckpointDirectoryError, CorruptFileError, NkserdeError
from ..format import bounded, history_log, limits
from ..format.atomic import atomic_write, fsync_directory
from .lock import DirectoryLock

STEP_FILE = re.compile(r"^step-(\d+)\.nks$")
HISTORY_FILE = re.compile(r"^history-(\d{6,})\.nkh$")  # a history log: records appended by checkpoints
RUN_DIRECTORY = re.compile(r"^run-(\d+)$")
FINGERPRINT_FILE = "fingerprint.json"  # what defines the run of a Checkpoint directory
ERROR_REQUEUES_FILE = "error-requeues"  # a count: Checkpoint(requeue_on_error=N)
PREVIOUS = "previous-"  # + a time: checkpoints moved aside


def step_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step-{step:010d}.nks"


def _numbered(directory: Path, pattern: re.Pattern) -> list[tuple[int, Path]]:
    """The entries of ``directory`` whose name ``pattern`` matches, as
    (the number its first group holds, path), by number; [] if there is no
    such directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := pattern.match(p.name))]
    return sorted(found)


def steps(directory: Path) -> list[int]:
    """Steps that have a checkpoint file in ``directory``, oldest first."""
    return [step for step, _ in _numbered(directory, STEP_FILE)]


def history_files(directory: Path) -> list[Path]:
    """The history logs in ``directory``, oldest (lowest number) first."""
    return [p for _, p in _numbered(directory, HISTORY_FILE)]


def new_history_path(directory: Path) -> Path:
    """Where a new history log of ``directory`` goes: a number after every
    existing one (a log is never replaced)."""
    logs = history_files(directory)
    number = int(HISTORY_FILE.match(logs[-1].name).group(1)) + 1 if logs else 1
    return Path(directory) / f"history-{number:06d}.nkh"


def history_path(directory: Path, name) -> Path:
    """The history log ``name`` (as a checkpoint names it) of ``directory``;
    CorruptFileError if it is not a history log's name (a path elsewhere)."""
    if not isinstance(name, str) or not HISTORY_FILE.match(name):
        raise CorruptFileError(f"{directory}: {name!r:.80} is not the name of a history log")
    return Path(directory) / name


def history_lineage(directory: Path, position: dict) -> list[tuple[Path, dict, int]]:
    """The history logs of ``directory`` that ``position`` (a checkpoint's)
    reaches back through, oldest first: ``(path, position in it, chain at
    its start)``. A log continues its parent's position; a parent is older
    (a smaller number), so the walk ends. A log that is missing, or not
    the one named (another id), is a CorruptFileError naming it."""
    directory = Path(directory)
    out = []
    while position is not None:
        path = history_path(directory, position["file"])
        number = int(HISTORY_FILE.match(path.name).group(1))
        if out and number >= int(HISTORY_FILE.match(out[-1][0].name).group(1)):
            raise CorruptFileError(f"{out[-1][0]}: continues {path.name}, which is not an older history log")
        try:
            header = history_log.read_header(path)
        except FileNotFoundError:
            raise CorruptFileError(f"{path}: the history log is missing") from None
        if header["id"] != position["id"]:
            raise CorruptFileError(
                f"{path}: history log id {header['id']}, expected {position['id']} (another log under that name)"
            )
        parent = header.get("parent")
        out.append((path, position, parent["chain"] if parent is not None else 0))
        position = parent
    return out[::-1]


def read_history(directory: Path, position: dict, *, decode: bool = True) -> list[tuple[str, object]]:
    """Every record up to ``position`` (a checkpoint's) in the history logs
    of ``directory``, oldest first, each checked and the whole chain
    compared with the position's: ``(where, tree)``, where names the log and
    the record (``history-000001.nkh record 3``), the tree None without
    ``decode``. Raises CorruptFileError naming the log and the record."""
    position = history_log.check_position(position, f"{directory}: a checkpoint")
    budget = history_log.Budget()
    records = []
    for path, part, chain_start in history_lineage(directory, position):
        trees, chain = history_log.read_records(
            path,
            file_id=part["id"],
            end=part["end"],
            records=part["records"],
            chain_start=chain_start,
            decode=decode,
            budget=budget,
        )
        if chain != part["chain"]:
            raise CorruptFileError(
                f"{path}: its {part['records']} records up to byte {part['end']} chain to {chain:#018x}, "
                f"the checkpoint recorded {part['chain']:#018x}: the history log was rewritten or damaged"
            )
        records += [(f"{path.name} record {i}", tree) for i, tree in enumerate(trees)]
    return records


def runs(directory: Path) -> list[Path]:
    """The ``run-<i>`` subdirectories of a ``checkpointed(...)`` directory,
    in order."""
    return [p for _, p in _numbered(directory, RUN_DIRECTORY)]


def check(path: Path) -> None:
    """Returns if the file verifies (every checksum, the structure, the
    load limits) and the logger histories a checkpoint keeps in the
    directory's history logs with it (every record up to its position,
    every checksum and the chain); raises what is wrong
    (CorruptFileError, UnsupportedVersionError, FileReadError, OSError)."""
    header = fileformat.drain(fileformat.verify_steps(Path(path)))
    position = checkpoint_file.history_position(header["tree"])
    if position is not None:
        read_history(Path(path).parent, position, decode=False)


def problem(path: Path) -> str | None:
    """None if :func:`check` passes, else what is wrong, in one line."""
    try:
        check(path)
        return None
    except (NkserdeError, OSError) as exc:
        return " ".join(str(exc).split())


def verifies(path: Path) -> bool:
    return problem(path) is None


def resume_file(directory: Path, read=check, *, warn: bool = False) -> tuple[Path, object] | None:
    """The one rule for which checkpoint a resume takes: the newest
    ``step-*.nks`` in ``directory`` that ``read`` accepts, as (path, what
    ``read`` returned), or None. ``read`` is :func:`check` (``nkserde ls``,
    ``nkserde.load`` of a directory) or a load that checks as much (a
    Checkpoint's resume); NkserdeError and OSError from it skip the file,
    with a warning when ``warn``."""
    for step in reversed(steps(directory)):
        path = step_path(directory, step)
        try:
            return path, read(path)
        except (NkserdeError, OSError) as exc:  # damaged, unreadable (EIO), too new, over a limit
            if warn:
                message = " ".join(str(exc).split())
                warnings.warn(f"nkserde: skipping checkpoint {path}: {message}", stacklevel=outside())
    return None


def latest(directory: Path, *, warn: bool = False) -> Path | None:
    """The newest checkpoint in ``directory`` that verifies, or None
    (:func:`resume_file` with :func:`check`). ``warn``: say which damaged
    ones were skipped."""
    found = resume_file(directory, warn=warn)
    return None if found is None else found[0]


def newest_verified(directory: Path) -> Path:
    """The checkpoint file :func:`nkserde.load` reads for a directory: the
    newest that verifies in a Checkpoint directory, or in the only run of a
    ``checkpointed(...)`` directory. Raises NkserdeError when there is none
    or the choice is ambiguous."""
    directory = Path(directory)
    if not steps(directory):
        subdirectories = runs(directory)
        if len(subdirectories) > 1:
            names = ", ".join(str(p) for p in subdirectories)
            raise NkserdeError(
                f"{directory}: holds the checkpoints of {len(subdirectories)} run() calls; load one of {names}"
            )
        if subdirectories:
            directory = subdirectories[0]
    found = latest(directory, warn=True)
    if found is None:
        raise NkserdeError(f"{directory}: no checkpoint that verifies")
    return found


def checkpoint_directories(directory: Path) -> list[tuple[int | None, Path]]:
    """The Checkpoint directories in ``directory``: itself (run None) if it
    holds checkpoints or a fingerprint, else its ``run-<i>`` subdirectories
    (``checkpointed(...)``), as (i, path)."""
    directory = Path(directory)
    if steps(directory) or (directory / FINGERPRINT_FILE).is_file():
        return [(None, directory)]
    return [(int(RUN_DIRECTORY.match(p.name).group(1)), p) for p in runs(directory)]


def unusable(directory: Path) -> CheckpointDirectoryError | None:
    """Why ``directory`` cannot be a checkpoint directory, as far as it is
    known without writing there (a file in its place or above it, a
    read-only file system, no write permission), or None."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        return CheckpointDirectoryError(
            errno.ENOTDIR, f"{path}: is a file, not a directory: give the Checkpoint a directory (or move the file)"
        )
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return CheckpointDirectoryError(
            errno.ENOTDIR, f"{path}: cannot be created: {existing} is a file, not a directory"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        read_only = _read_only(existing)
        why = "is on a read-only file system" if read_only else "is not writable by this user"
        message = f"{path}: {why}" if existing == path else f"{path}: cannot be created: {existing} {why}"
        return CheckpointDirectoryError(
            errno.EROFS if read_only else errno.EACCES,
            f"{message}; checkpoints need a directory this process can write",
        )
    return None


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def read_fingerprint(directory: Path) -> dict | None:
    """The run fingerprint of a Checkpoint directory, None when it has none.
    A damaged one (not a JSON object, or past the header limit: it is a few
    KiB) is a CorruptFileError naming it."""
    path = Path(directory) / FINGERPRINT_FILE
    if not path.exists():  # anything else there (a directory, a fifo) is read, and refused
        return None
    fields = bounded.read_json(path, limits.current().max_header_bytes, "run fingerprint")
    if not isinstance(fields, dict):
        raise CorruptFileError(f"{path}: the run fingerprint is not a JSON object")
    return fields


def write_fingerprint(directory: Path, fingerprint: dict) -> None:
    with atomic_write(Path(directory) / FINGERPRINT_FILE) as f:
        f.write(json.dumps(fingerprint, indent=1, sort_keys=True).encode())


class RunDirectory:
    """The files of one checkpointed run in ``path`` (created on demand),
    with its lock (``jobs``: how it asks SLURM about a job holding it,
    :class:`~nkserde.checkpoint_files.lock.DirectoryLock`)."""

    def __init__(self, path, jobs=None):
        self.path = Path(path)
        self.lock = DirectoryLock(self.path, jobs)

    def create(self) -> None:
        problem = unusable(self.path)
        if problem is not None:
            raise problem
        missing = []  # the directories made here, whose entries a power cut could take with their checkpoints
        level = self.path
        while not level.is_dir() and level != level.parent:
            missing.append(level)
            level = level.parent
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointDirectoryError(
                exc.errno, f"{self.path}: creating the checkpoint directory failed: {exc.strerror or exc}"
            ) from None
        for made in reversed(missing):
            # best effort: a parent this process may not open (a drop-box
            # directory) or sync stops no run; the checkpoints' own fsyncs stand
            with contextlib.suppress(OSError):
                fsync_directory(made.parent)

    def steps(self) -> list[int]:
        """Steps that have a checkpoint file, oldest first."""
        return steps(self.path)

    def step_path(self, step: int) -> Path:
        return step_path(self.path, step)

    def latest(self) -> Path | None:
        """Path of the newest checkpoint that verifies, or None."""
        return latest(self.path)

    def resume_file(self, read=check, *, warn: bool = False) -> tuple[Path, object] | None:
        """:func:`resume_file` in this directory."""
        return resume_file(self.path, read, warn=warn)

    @property
    def fingerprint_path(self) -> Path:
        return self.path / FINGERPRINT_FILE

    def has_history(self) -> bool:
        """Whether a run has used this directory (checkpoints or a fingerprint)."""
        return bool(self.steps()) or self.fingerprint_path.exists()

    def read_fingerprint(self) -> dict:
        """The stored fingerprint, or {} when there is none (see
        :func:`read_fingerprint`)."""
        return read_fingerprint(self.path) or {}

    def write_fingerprint(self, fingerprint: dict) -> None:
        write_fingerprint(self.path, fingerprint)

    def error_requeues(self) -> int:
        """How often a job of this run was requeued after the run failed (0
        when never; an unreadable count counts as 0)."""
        try:
            text = bounded.read_capped(self.path / ERROR_REQUEUES_FILE, 64, "requeue count").decode()
            return max(0, int(text.strip()))
        except (OSError, ValueError, NkserdeError):
            return 0

    def count_error_requeue(self) -> None:
        with atomic_write(self.path / ERROR_REQUEUES_FILE) as f:
            f.write(f"{self.error_requeues() + 1}\n".encode())

    def move_aside(self) -> Path:
        """Moves every checkpoint, the history logs they refer to and the
        fingerprint into a new ``previous-<time>/`` (nothing is deleted);
        returns it."""
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        target = self.path / f"{PREVIOUS}{stamp}"
        target.mkdir()
        for p in self.path.iterdir():
            if STEP_FILE.match(p.name) or HISTORY_FILE.match(p.name) or p.name == FINGERPRINT_FILE:
                p.rename(target / p.name)
        # durable before the fresh run writes anything: the new entries first,
        # then their removal here (the other order can lose the files in a cut)
        fsync_directory(target)
        fsync_directory(self.path)
        return target

    def retire(self, policy, newest: int, failed: list | None = None) -> list[int]:
        """Deletes the checkpoints ``policy`` (a
        :class:`nkserde.checkpoint.keep_policy.KeepPolicy`) does not keep once
        ``newest`` is written and verified; returns their steps. A deletion
        that fails (a read-only file system) leaves the file and appends
        ``(step, OSError)`` to ``failed`` (raised if ``failed`` is None)."""
        retired = policy.retired(self.steps(), newest)
        for step in retired:
            try:
                self.step_path(step).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if failed is None:
                    raise
                failed.append((step, exc))
        return retired
