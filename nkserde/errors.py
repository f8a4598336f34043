"""Exceptions raised by nkserde.

Every error that concerns a file names the file; every error that concerns a
place inside an object names that place as a ``/``-separated path such as
``state/parameters/Dense/kernel``.
"""

from __future__ import annotations

import copy


class NkserdeError(Exception):
    """Base class of every error nkserde raises on purpose."""


class CorruptFileError(NkserdeError):
    """The file is not a complete, intact nkserde file (bad magic, truncated,
    checksum mismatch, undecodable header or payload)."""


class LoadLimitError(CorruptFileError):
    """A file declares more than a load limit allows (a header or a decoded
    size beyond ``nkserde.set_load_limits``): it is damaged, hostile, or
    bigger than this process is prepared to load."""


class TemplateMismatchError(NkserdeError):
    """The template and the file disagree on structure, shape, dtype or type."""


class NoSuchPathError(NkserdeError):
    """A path asked for (``load(..., at=...)``, ``nkserde.open(path)[...]``)
    is not in the file."""


class UnsupportedVersionError(NkserdeError):
    """The file was written by a newer format or schema version than this
    nkserde understands, and no migration leads from it to the current one."""


class MigrationError(UnsupportedVersionError):
    """An old schema version could be upgraded only with something the load
    does not have (e.g. the template's model, when a file is migrated
    without a template)."""


class UnregisteredTypeError(NkserdeError):
    """An object (when saving) or a type name (when loading) has no
    registration."""


class UnsupportedNetKetError(NkserdeError):
    """A feature needs a NetKet API that the installed NetKet lacks."""


class RunMismatchError(NkserdeError):
    """``resume="auto"`` found checkpoints of another run in a Checkpoint
    directory: the run's fingerprint (what the script chose: the operator,
    the model, the sampling, the optimizer, ...) differs from the one in the
    directory's ``fingerprint.json``. ``directory`` is the directory,
    ``changes`` one line per difference, in the script's words where they
    exist (``operator: Ising h 1.0 -> 1.5``). The ways on: run the script
    that wrote the checkpoints, ``resume="force"`` (resume them with the new
    settings) or ``resume="never"`` (start fresh; the old checkpoints are
    moved to ``previous-<time>/``)."""

    def __init__(self, message: str, directory=None, changes=()):
        super().__init__(message)
        self.directory = directory
        self.changes = list(changes)


class ProcessMismatchError(NkserdeError):
    """In a run of several processes, a value that should be the same on
    every process (parameters, optimizer state, structure) differs: a bug in
    the run, reported before anything is written."""


class _SystemError(NkserdeError, OSError):
    """An nkserde error caused by the operating system: ``errno`` is the
    system's; the message (``strerror``) names the file and what failed."""

    def __str__(self):
        return self.strerror if self.strerror else super().__str__()


class FileWriteError(_SystemError):
    """A save could not write, fsync or rename its file (disk full, I/O
    error, a vanished directory). The message names the file and the step;
    ``errno`` is the system's. Unless the step was the final fsync of the
    directory, the file at the target is untouched. Also an OSError, so code
    that handles a full disk as an OSError keeps working."""


class CheckpointDirectoryError(_SystemError):
    """A checkpoint directory cannot be used: a file is where it should be,
    it or its parent is read-only or not writable, or creating it or its
    lock failed. The message names the directory, what failed and what to
    do; ``errno`` is the system's. Raised by ``Checkpoint(...)`` and
    ``checkpointed(...)`` where it is known then, when a run starts
    otherwise."""


class FileReadError(_SystemError):
    """Reading a file failed in the operating system (an I/O error of the
    disk or network file system), as opposed to a file whose content is
    damaged (CorruptFileError). A missing file stays FileNotFoundError."""


class DistributedSaveError(NkserdeError):
    """A save from several processes failed on one of them (all of them
    raise it; the target file is untouched)."""


class PeerLostError(DistributedSaveError):
    """Another process of the run did not reach a point where all of them
    meet (a save, the start of a run) within the timeout: it died (killed,
    out of memory) or is stuck. ``missing``: the ranks that did not arrive
    (empty if unknown). The checkpoints on disk are intact."""

    def __init__(self, message: str, missing=()):
        super().__init__(message)
        self.missing = list(missing)


def in_file(exc: NkserdeError, where, after: str = "", *, unless=None) -> NkserdeError:
    """``exc`` again with its message led by ``where`` (a file, or a
    directory and what was done there: ``f"{directory}: init_from={src}"``)
    and followed by ``after``; the same type and attributes (``errno``,
    ``directory``, ``changes``, ``missing``). A message that starts with
    ``where`` already (or with ``unless``: e.g. the directory, whose other
    file the message names) is not led again. Raise it ``from None``."""
    message = str(exc)
    named = any(p is not None and message.startswith(str(p)) for p in (where, unless))
    text = (message if named else f"{where}: {message}") + after
    new = copy.copy(exc)
    if isinstance(new, OSError) and new.strerror is not None:  # _SystemError: str() is strerror
        new.strerror, new.args = text, (new.errno, text)
    else:
        new.args = (text,)
    return new


def format_path(path) -> str:
    """``("state", "parameters", "Dense")`` -> ``"state/parameters/Dense"``;
    the empty path is the root, ``"<root>"``."""
    return "/".join(str(p) for p in path) if path else "<root>"
