"""``nkserde.load``: a file into a template, in one place::

    path -> a directory: its newest checkpoint that verifies
         -> a file NetKet wrote: netket_files.py
         -> the header read, arrays as the template asks for them
         -> rename=, at=, a checkpoint's driver: partial_load.py
         -> the template's walk: walk.py
         -> an error named with the file, the path inside the object,
            and what to do instead (mismatch_hints.py)

The Checkpoint's resume loads through here too
(nkserde/checkpoint/persist/restore.py).
"""

from __future__ import annotations

from pathlib import Path

from .. import format as fileformat
from ..checkpoint_files import content as checkpoint_file, directory
from ..errors import (
    CorruptFileError,
    FileReadError,
    NkserdeError,
    TemplateMismatchError,
    UnsupportedVersionError,
    in_file,
)
from . import mismatch_hints, partial_load, walk


def load(template, path, *, at=None, strict: bool = True, rename=None, report: bool = False):
    """A new object shaped like ``template`` (built the same way as the saved
    object) with every number read from ``path``. The template is not
    mutated. Raises FileNotFoundError, or an ``nkserde.errors`` exception
    naming the file, the path inside the object, and what differs.

    ``at``: load the part of the file stored at this path (``"state"``: the
    variational state of a driver; ``"state/parameters"`` into a parameter
    pytree); paths are the ones error messages name, and then name the
    file's paths (``state/parameters/Dense/kernel``). Raises
    NoSuchPathError if the file has nothing there.

    ``strict=False``: restore what matches and keep the template's value
    for every entry missing in the file or whose shape, dtype or type
    differs; stored entries the template has no place for are not used.
    Each is named in a :class:`nkserde.LoadReport`, returned with
    ``report=True``, else in one :class:`nkserde.PartialLoadWarning`
    (``.report``) shown at the line that called ``load``. A stored object of
    another kind of the same family loads its shared fields only: an
    MCState's parameters and model state into a FullSumState (and back:
    the MCState keeps its template's sampler state), a driver's
    variational state into another driver (its optimizer state, step and
    the rest stay the template's).

    ``rename``: a mapping ``{file path: template path}`` (prefixes: every
    path under the key moves) or a function ``file path -> path``, applied
    to the file's paths before ``at`` and before matching (a renamed
    module: ``{"state/parameters/Dense_0": "state/parameters/Dense_1"}``).

    ``report=True``: return ``(object, LoadReport)``.

    ``path`` may also be a file NetKet wrote: a flax ``.mpack`` of a
    variational state or of its variables, or an nqxpack file or directory (see
    ``nkserde/loading/netket_files.py``), recognised by its content. Or a
    checkpoint written by :class:`nkserde.Checkpoint`
    (the driver it holds is loaded), or a checkpoint directory: its newest
    checkpoint that verifies is loaded (a directory of ``checkpointed(...)``
    with one ``run-<i>`` subdirectory stands for that subdirectory)."""
    path = Path(path)
    if path.is_dir() and not _netket_file(path):
        path = directory.newest_verified(path)
    if _netket_file(path):
        if at is not None or rename is not None or not strict or report:
            raise NkserdeError(
                f"{path}: at=, rename=, strict=False and report= apply to nkserde files; this is a file NetKet wrote"
            )
        from . import netket_files

        return netket_files.load(template, path)
    with fileformat.LazyFile(path) as lazy:  # arrays are read as the template asks for them
        return _load_lazy(template, path, lazy, at=at, strict=strict, rename=rename, report=report)


def _load_lazy(template, path, lazy, *, at, strict, rename, report):
    header, state = lazy.header, lazy.tree
    state, _ = partial_load.apply_renames(state, rename, path)
    where = ()
    if at is not None and partial_load.split(at):
        at_parts = partial_load.split(at)
        if checkpoint_file.is_checkpoint(state) and at_parts[0] not in state:
            at_parts = (checkpoint_file.DRIVER,) + at_parts  # a Checkpoint's file: paths inside its driver
        state, where = partial_load.select(state, at_parts, path)
    elif checkpoint_file.is_checkpoint(state) and not checkpoint_file.is_checkpoint_template(template):
        state = state[checkpoint_file.DRIVER]
    log = partial_load.LoadReport(file=str(path), at=partial_load.format_path(where) if where else "", strict=strict)
    try:
        obj = walk.from_state_dict(template, state, where, walk.LoadContext(report=log))
    except UnsupportedVersionError as exc:
        raise in_file(exc, path, written_by(header.get("meta"))) from None
    except (CorruptFileError, FileReadError):  # LoadLimitError is a CorruptFileError
        raise  # raised by the reader: names the file already
    except TemplateMismatchError as exc:
        raise in_file(exc, path, mismatch_hints.what_to_do(template, state, where, path) if strict else "") from None
    except NkserdeError as exc:
        raise in_file(exc, path) from None  # a lazy read's error names the file already
    if report:  # asked for: returned, not warned about
        return obj, log
    log.warn()
    return obj


def _netket_file(path: Path) -> bool:
    """A file NetKet wrote (flax .mpack, nqxpack, nqxpack's directory
    form), by its first bytes."""
    from ..format import foreign
    from ..format.reader import read_errors

    with read_errors(path):
        return foreign.netket_kind(path) is not None


def from_state_dict(template, state) -> object:
    """A new object shaped like ``template`` with every value from ``state``
    (as returned by :func:`state_dict`). The template is not mutated."""
    return walk.from_state_dict(template, state)


def load_state_dict(path) -> object:
    """The file's state dict, without a template: nested dicts and lists of
    numpy arrays and scalars, stored objects as ``{"@type", "@version", ...}``
    maps. Pass (parts of) it to :func:`from_state_dict`."""
    return fileformat.read_file(Path(path))[1]


def written_by(meta) -> str:
    """`` (written by nkserde X with NetKet Y)`` from a file's metadata."""
    if not isinstance(meta, dict):
        return ""
    return f" (the file was written by nkserde {meta.get('nkserde')} with NetKet {meta.get('netket')})"
