"""The save line, one for ``nkserde.save`` and the Checkpoint alike::

    snapshot -> host -> encode -> write -> commit

1. snapshot (snapshot.py): the objects' state dict, on the caller's
   thread, where a value no file can hold is refused, named by its path
   (text, dtypes: nkserde/format/layout.py); arrays in a GPU's or TPU's
   memory held as they are.
2. host: their copies to the host, all started before the first is
   waited for.
3. encode: the state dict as the header's tree and the arrays to write
   (a state dict saved as it is, by save_state_dict, checked there).
4. write: the arrays streamed into a temporary file beside the target,
   the header after them, all fsynced.
5. commit: the temporary file renamed over the target, the directory
   fsynced: the target holds the old file or the new one, whole.

:func:`save_steps` runs stages 2 to 5 as a generator of bounded steps that
any thread may advance: :func:`save` drains it at once after its
snapshot; a Checkpoint takes the snapshot in the run's thread and hands
the steps to its writer (nkserde/checkpoint/persist/saving.py). In a run
of several processes every process runs the line, and encode, write and
commit are rounds with the others (nkserde/format/together.py).
"""

from __future__ import annotations

import datetime
import functools
import platform
from importlib import metadata
from pathlib import Path

import jax

from .. import format as fileformat
from ..format import writer
from ..format.tree_codec import TYPE
from .snapshot import Snapshot, snapshot, to_host


def save(obj, path) -> Path:
    """Writes ``obj`` to ``path`` as one nkserde file, atomically: after a
    crash at any point ``path`` holds either its previous content or the
    complete new file. Returns the path.

    In a run of several JAX processes every process calls ``save`` with the
    same path (on a file system all of them see); together they write one
    file: replicated values once, arrays split over processes assembled from
    each process's blocks, per-process values stacked. See
    docs/distributed.md."""
    snap = snapshot(obj)
    return fileformat.drain(save_steps(snap, path, root_type=type(obj).__name__))


def save_state_dict(state, path, *, root_type: str | None = None) -> Path:
    """Writes a state dict (as returned by :func:`state_dict`) to ``path``,
    atomically. Lets a caller take the state dict now (a cheap host
    snapshot) and write it later, e.g. from a background thread."""
    return fileformat.drain(save_steps(Snapshot(state), path, root_type=root_type))


def save_steps(snap: Snapshot, path, *, root_type: str | None = None, sequence: str | None = None):
    """The stages of a save after its snapshot (host, encode, write,
    commit), each handed the last one's result, as a generator of steps,
    each a bounded piece of the write, returning the path: any thread may
    advance it (a background writer that falls behind is finished by the
    run's thread). In a run of several processes each round with the
    others is one step.
    ``root_type``: what the file's metadata names as its content (default:
    the type of the state dict's root). ``sequence``: the name of a series
    of saves that never overlap (a Checkpoint's, one directory): they share
    coordination keys, each deleting the last one's; by default one per
    target file."""
    path = Path(path)
    meta = new_meta(snap.state, root_type or type(snap.state).__name__)
    with _file_write(path, meta, sequence) as write:
        state = yield from to_host(snap)
        write.encode(state)
        yield from write.write()
        return write.commit()


def _file_write(path: Path, meta: dict, sequence: str | None):
    """The write of one file: this process's alone, or in a run of several
    processes every process's part of it (format/together.py)."""
    if jax.process_count() == 1:
        return writer.FileWrite(path, meta)
    from ..processes.jax_service import coordination_name, group

    # one key sequence per target: saves to different files (an
    # asynchronous checkpoint and a direct save) cannot cross
    return writer.TogetherWrite(path, meta, group(sequence or coordination_name("save", path)))


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
