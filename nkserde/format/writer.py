"""Writers: one streaming pass, no in-memory copy of the state.

A write is three stages, which the save line calls in order
(nkserde/saving/line.py) and the entry points here call the same way:
``encode(tree)`` (the tree as the header's tree and the arrays to write),
``write()`` (a generator of steps: the arrays streamed into a temporary
file beside the target, the header after them), ``commit()`` (the
temporary file fsynced and renamed over the target, the directory
fsynced); used as a context manager, a write that does not commit leaves
the target untouched and its temporary file removed.

:class:`FileWrite` is one process's; :class:`TogetherWrite` (together.py)
is every process's of a multi-process run, writing one file in rounds of
the Communicator it is given (an error on one process raises on all of
them; the coordinator serves O(P)). The protocol, step by step, is
described once, in docs/distributed.md ("Who writes what").
:func:`write_file` and :func:`write_file_together` are the entry points
for a plain tree. Both stream each array with nkserde.format.array_write
and end the file with the header of nkserde.format.header.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..types.placement import GlobalArray
from . import tree_codec
from .array_write import stored_dtype, stream_array_steps
from .atomic import atomic_write
from .header import write_header
from .layout import FORMAT_VERSION, MAGIC, PREAMBLE
from .together import Communicator, TogetherWrite


def drain(steps):
    """Runs a generator of steps to its end; returns its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def write_file(path, tree, meta: dict) -> Path:
    """Writes ``tree`` (a plain tree, see the package doc) and ``meta`` (a
    msgpack-safe dict) to ``path`` atomically; the metadata written is
    ``meta`` with ``types``, the stored objects' types and versions, read
    off the tree as it is encoded. Returns the path.

    Extra memory: at most one non-contiguous array's copy and one compression
    chunk at a time; contiguous numpy arrays are written from their buffers.
    """
    return drain(write_file_steps(path, tree, meta))


def write_file_steps(path, tree, meta: dict):
    """:func:`write_file` as a generator that yields between pieces of work
    (at most ``codecs.CHUNK`` bytes each) and returns the path. Whichever
    thread advances it does the next piece: a background writer can be
    finished by the run's own thread when it falls behind. A generator
    closed before its end leaves ``path`` untouched (the temporary file is
    removed)."""
    with FileWrite(path, meta) as write:
        write.encode(tree)
        yield from write.write()
        return write.commit()


class FileWrite:
    """One process's write of a plain tree (see the package doc) and
    ``meta`` to ``path``, in its three stages (see the module doc)."""

    def __init__(self, path, meta: dict):
        self.path, self.meta = Path(path), meta
        self.encoded = None  # (header tree, arrays, their paths, the stored types)
        self._file = contextlib.ExitStack()  # the temporary file, until it is committed

    def encode(self, tree) -> None:
        """``tree`` as the header's tree, the list of arrays to write (and
        their paths) and the stored objects' types, which the metadata
        lists."""
        arrays, paths, types = [], [], {}
        self.encoded = (tree_codec.encode(tree, arrays, paths, types=types), arrays, paths, types)

    def write(self):
        """Steps: the arrays streamed into a temporary file beside the
        target, each from its own buffer (contiguous numpy arrays are not
        copied), then the header."""
        header, arrays, paths, types = self.encoded
        f = self._file.enter_context(atomic_write(self.path))
        f.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0))
        position = PREAMBLE.size
        index = []
        for array, where in zip(arrays, paths):
            if isinstance(array, GlobalArray):
                raise TypeError("an array spread over processes needs write_file_together")
            name = stored_dtype(array, where)
            entry, position = yield from stream_array_steps(f, array, position)
            index.append({"dtype": name, "shape": list(array.shape), "nbytes": array.nbytes, **entry})
            yield
        write_header(f, position, header, index, {**self.meta, "types": types})

    def commit(self) -> Path:
        """The temporary file fsynced and renamed over the target, the
        directory fsynced. Returns the path."""
        self._file.close()
        return self.path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        # not committed (an error, a generator closed mid-write): the
        # temporary file goes, the target stays as it was
        return self._file.__exit__(*exc)


# --------------------------------------------------------------------------- several processes


def write_file_together(path, tree, meta: dict, comm: Communicator) -> Path:
    """Called by every process of a run with its own ``tree`` (numpy arrays
    for replicated values, ``GlobalArray`` for arrays spread over processes,
    ``PerProcess`` for process-local values); writes one file at ``path``
    (a directory all processes see), atomically. ``meta`` is taken from
    process 0 (with ``types``, as :func:`write_file`). Returns the path on every process once the file is in place.

    Two rounds through process 0 (docs/distributed.md): each process sends
    a digest of what must agree, its blocks' sizes and its per-process
    values; process 0 checks, lays out the file, creates it and answers
    with where each process's blocks go; each process writes them; process
    0 publishes the file and answers. The coordinator serves O(P)
    requests and bytes.

    Raises ProcessMismatchError if the processes disagree on a value that
    must be replicated, DistributedSaveError if a step failed elsewhere
    (PeerLostError if a process did not arrive).
    """
    return drain(write_file_together_steps(path, tree, meta, comm))


def write_file_together_steps(path, tree, meta: dict, comm: Communicator):
    """:func:`write_file_together` as a generator of steps returning the
    path (see :func:`write_file_steps`); every process must advance its
    own to the end."""
    with TogetherWrite(Path(path), meta, comm) as write:
        write.encode(tree)
        yield from write.write()
        return write.commit()
