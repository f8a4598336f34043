"""save / load / info / state_dict / from_state_dict: the registry meets the
file format here."""

from __future__ import annotations

import datetime
import functools
import platform
from importlib import metadata
from pathlib import Path

import jax

from .loading import file_info, mismatch_hints, partial_load, walk as tree_load
from .saving import snapshot as tree
from .types import registry
from .checkpoint_files import content as checkpoint_file, directory
from . import format as fileformat
from .format.tree_codec import TYPE
from .errors import (
    CorruptFileError,
    FileReadError,
    NkserdeError,
    TemplateMismatchError,
    UnsupportedVersionError,
    in_file,
)
from .loading.file_info import contents, info, jsonable, verify, verify_steps  # noqa: F401  (nkserde.api's API)
from .types.placement import fetched

# what save and load store: NetKet's types are registered before either runs
from . import netket as _netket_registrations  # noqa: F401


def state_dict(obj) -> object:
    """``obj`` as nested dicts/lists of numpy arrays and Python scalars in
    nkserde's schema; registered objects carry ``@type`` and ``@version``."""
    return tree.to_state_dict(obj)


def from_state_dict(template, state) -> object:
    """A new object shaped like ``template`` with every value from ``state``
    (as returned by :func:`state_dict`). The template is not mutated."""
    return tree_load.from_state_dict(template, state)


@functools.cache
def installed_version(dist: str) -> str | None:
    """The installed version of the distribution ``dist``, or None. Cached:
    importlib.metadata lookups cost ~0.5 ms each."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _library_versions() -> dict:
    """The versions a file records as its writers'."""
    return {
        "nkserde": installed_version("nkserde"),
        "netket": installed_version("netket"),
        "jax": jax.__version__,
        "flax": installed_version("flax"),
        "numpy": installed_version("numpy"),
        "python": platform.python_version(),
    }


def _root_type(state, fallback: str) -> str:
    if isinstance(state, dict) and TYPE in state:
        return state[TYPE]
    return fallback


def new_meta(state, root_type: str) -> dict:
    """The metadata of a file written now holding ``state`` (the writer
    adds the types it holds, met as it encodes them)."""
    return {
        **_library_versions(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "process_count": jax.process_count(),
        "platform": jax.default_backend(),  # where the run computed: a resume elsewhere says so
        "root_type": _root_type(state, root_type),
    }


def written_by(meta) -> str:
    """`` (written by nkserde X with NetKet Y)`` from a file's metadata."""
    if not isinstance(meta, dict):
        return ""
    return f" (the file was written by nkserde {meta.get('nkserde')} with NetKet {meta.get('netket')})"


def save(obj, path) -> Path:
    """Writes ``obj`` to ``path`` as one nkserde file, atomically: after a
    crash at any point ``path`` holds either its previous content or the
    complete new file. Returns the path.

    In a run of several JAX processes every process calls ``save`` with the
    same path (on a file system all of them see); together they write one
    file: replicated values once, arrays split over processes assembled from
    each process's blocks, per-process values stacked. See
    docs/distributed.md."""
    state, held = tree.snapshot(obj)  # arrays in device memory: held, copied by the write's first step
    return fileformat.drain(save_state_dict_steps(state, path, root_type=type(obj).__name__, held=held))


def save_state_dict(state, path, *, root_type: str | None = None) -> Path:
    """Writes a state dict (as returned by :func:`state_dict`) to ``path``,
    atomically. Lets a caller take the state dict now (a cheap host
    snapshot) and write it later, e.g. from a background thread."""
    return fileformat.drain(save_state_dict_steps(state, path, root_type=root_type))


def save_state_dict_steps(state, path, *, root_type: str | None = None, sequence: str | None = None, held=()):
    """:func:`save_state_dict` as a generator of steps, each a bounded piece
    of the write, returning the path: any thread may advance it (a
    background writer that falls behind is finished by the run's thread).
    In a run of several processes each round with the others is one step.
    ``sequence``: the name of a series of saves that never overlap (a
    Checkpoint's, one directory): they share coordination keys, each
    deleting the last one's; by default one per target file. ``held``: the
    arrays of ``state`` still in device memory (as ``tree.snapshot``
    returns them), copied to the host by the first step: all their copies
    are started before it waits for the first, so they cross together."""
    path = Path(path)
    if held:
        for array in held:
            array.start_copy()
        state = fetched(state)
        yield
    meta = new_meta(state, root_type or type(state).__name__)
    if jax.process_count() > 1:
        from .processes.jax_service import coordination_name, group
        from .format.writer import write_file_together_steps

        # one key sequence per target: saves to different files (an
        # asynchronous checkpoint and a direct save) cannot cross
        name = sequence or coordination_name("save", path)
        return (yield from write_file_together_steps(path, state, meta, group(name)))
    return (yield from fileformat.write_file_steps(path, state, meta))


def check_storable(obj) -> None:
    """Raises UnregisteredTypeError (naming the path) if ``obj`` holds a
    value nkserde cannot store; reads no array (cheap on accelerators)."""
    tree.to_state_dict(obj, check_only=True)


def is_registered(obj) -> bool:
    """Whether ``obj``'s type has a registration (its own or a rule's):
    whether a save stores it as an object of its type."""
    return registry.lookup(type(obj)) is not None


def stored_fields(type_name: str) -> tuple[str, ...]:
    """The fields the registration of a stored type name declares (old
    names resolved), or () if it declares none or the name is unknown."""
    reg = registry.lookup_name(type_name)
    return tuple(reg.fields or ()) if reg is not None else ()


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
    ``nkserde/foreign_load.py``), recognised by its content. Or a
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
        from .loading import netket_files as foreign_load

        return foreign_load.load(template, path)
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
        obj = tree_load.from_state_dict(template, state, where, tree_load.LoadContext(report=log))
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
    from .format import foreign
    from .format.reader import read_errors

    with read_errors(path):
        return foreign.netket_kind(path) is not None


class OpenFile:
    """A file opened for analysis by :func:`open`: reads what is asked for."""

    def __init__(self, path):
        path = Path(path)
        if path.is_dir():
            path = directory.newest_verified(path)
        self.path = path
        self._lazy = fileformat.LazyFile(path)

    @property
    def info(self) -> dict:
        """What :func:`info` returns."""
        return file_info.header_info(self._lazy.header)

    @property
    def tree(self):
        """The stored tree: nested dicts and lists, scalars, and
        ``LazyArray`` placeholders (``.shape``, ``.dtype``, ``.read()``)."""
        return self._lazy.tree

    def keys(self) -> list[str]:
        """The paths of every stored value (arrays and scalars)."""
        out = []

        def walk(node, path):
            names = partial_load.children(node)
            if not names or isinstance(node, fileformat.LazyArray):
                out.append(partial_load.format_path(path))
            for name in names:
                walk(node[int(name)] if isinstance(node, list) else node[name], path + (name,))

        walk(self._lazy.tree, ())
        return out

    def _at(self, path):
        state = self._lazy.tree
        parts = partial_load.split(path)
        if checkpoint_file.is_checkpoint(state) and parts and parts[0] not in state:
            parts = (checkpoint_file.DRIVER,) + parts
        return partial_load.select(state, parts, self.path)[0]

    def __contains__(self, path) -> bool:
        try:
            self._at(path)
        except NkserdeError:
            return False
        return True

    def __getitem__(self, path):
        """The value stored at ``path``, reading only its bytes: an array as
        a read-only ``np.memmap`` where it is stored raw in one block
        (nothing read until used; not checksum-verified, see :meth:`read`),
        else a numpy array read and verified; a subtree as nested dicts."""

        def get(node):
            if isinstance(node, fileformat.LazyArray):
                return node.memmap()
            if isinstance(node, dict):
                return {k: get(v) for k, v in node.items()}
            if isinstance(node, list):
                return [get(v) for v in node]
            return fileformat.materialize(node)

        return get(self._at(path))

    def read(self, path):
        """The value at ``path`` as verified numpy arrays (checksums checked)."""
        return fileformat.materialize(self._at(path))

    def close(self) -> None:
        self._lazy.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_file(path) -> OpenFile:
    """Opens a file (a Checkpoint's file or directory: its newest good
    checkpoint) for analysis without a template::

        with nkserde.open("run.nks") as f:
            kernel = f["state/parameters/Dense/kernel"]   # reads this entry only
            f.keys(); f.tree; f.info

    Paths are the ones :func:`load`'s ``at=`` takes (in a Checkpoint's file,
    paths inside its driver). The header is read and validated at once;
    an array only when asked for."""
    return OpenFile(path)


def load_state_dict(path) -> object:
    """The file's state dict, without a template: nested dicts and lists of
    numpy arrays and scalars, stored objects as ``{"@type", "@version", ...}``
    maps. Pass (parts of) it to :func:`from_state_dict`."""
    return fileformat.read_file(Path(path))[1]
