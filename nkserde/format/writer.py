"""Writers: one streaming pass, no in-memory copy of the state.

:func:`write_file` is the one-process writer. :func:`write_file_together`
is called by every process of a multi-process run with its own part of
the state and writes one file (see docs/distributed.md for the protocol):

1. every process encodes its tree, prepares the blocks it owns (process 0:
   replicated arrays and its own blocks; others: their blocks of global and
   stacked arrays, compressed in memory if they compress) and sends a small
   description (tree, array shapes, block sizes and checksums, checksums of
   its copies of the replicated arrays) to all others;
2. everyone checks the same things on the same descriptions: identical
   trees and replicated checksums (else ProcessMismatchError naming the
   path), blocks that tile each array; and computes the same layout: the
   others' blocks first, in process order, at known offsets, then process
   0's region, which it streams (its compressed lengths need not be known);
3. process 0 creates the temporary file; then every process writes its
   blocks into it at their offsets and fsyncs;
4. process 0 writes header and trailer, fsyncs, renames, fsyncs the
   directory; every process returns only after that.

Each step ends with an exchange of statuses, so an error on one process
raises DistributedSaveError on all of them instead of leaving some waiting.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Protocol

import msgpack
import numpy as np

from ..errors import (
    DistributedSaveError,
    NkserdeError,
    ProcessMismatchError,
    UnregisteredTypeError,
    format_path,
)
from ..parts import GlobalArray
from . import codecs, tree_codec
from .atomic import atomic_write, fsync_directory, remove_stale_temps, remove_temp, temp_name, write_error
from .checksum import checksum, streaming_checksum
from .layout import (
    END_MAGIC,
    FORMAT_VERSION,
    MAGIC,
    PAYLOAD_START,
    PREAMBLE,
    TRAILER,
    aligned_offset,
    dtype_name,
)

_ZEROS = bytes(PAYLOAD_START)


def _little_endian(array: np.ndarray) -> np.ndarray:
    bo = array.dtype.byteorder
    if bo == ">" or (bo == "=" and sys.byteorder == "big"):
        array = array.astype(array.dtype.newbyteorder("<"))
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    return array if array.flags.c_contiguous else array.copy(order="C")


def _bytes_of(array: np.ndarray) -> memoryview:
    array = _little_endian(array)
    return memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")


def _dtype(array, path=()) -> str:
    name = dtype_name(array.dtype)
    if name is None:
        raise UnregisteredTypeError(f"{format_path(path)}: cannot store arrays of dtype {array.dtype}")
    return name


# Raw arrays from this size on are checksummed in a second thread while the
# first writes them: xxhash and the file's write both release the GIL, so
# on two cores a save costs the write alone (benchmarks/save_load.py).
PARALLEL_CHECKSUM = 8 << 20


class _Checksum(threading.Thread):
    """The checksum of ``data``, computed in a thread of its own."""

    def __init__(self, data):
        super().__init__(name="nkserde-checksum", daemon=True)
        self._data, self._digest, self._error = data, None, None
        self.start()

    def run(self):
        try:
            self._digest = checksum(self._data)
        except BaseException as exc:  # re-raised in the writing thread
            self._error = exc

    def result(self) -> int:
        self.join()
        if self._error is not None:
            raise self._error
        return self._digest


def _stream_array_steps(f, array: np.ndarray, position: int, digest: int | None = None):
    """Writes ``array`` at the next aligned offset after ``position``,
    choosing its codec, yielding after every ``codecs.CHUNK`` bytes of a raw
    array (another thread may take over the write there, see
    :func:`write_file_steps`). ``digest``: the array bytes' checksum if
    already known (used if it is stored raw). Returns its storage entry and
    the new position."""
    start = aligned_offset(position)
    f.write(_ZEROS[: start - position])
    data = _bytes_of(array)
    codec, frame = codecs.choose_codec(data)
    if codec == codecs.RAW:
        hashing = None
        if digest is None:
            if data.nbytes >= PARALLEL_CHECKSUM:
                hashing = _Checksum(data)  # the same bytes, read while they are written
            else:
                digest = checksum(data)
        for chunk in range(0, data.nbytes, codecs.CHUNK):
            f.write(data[chunk : chunk + codecs.CHUNK])
            yield
        if hashing is not None:
            digest = hashing.result()
        stored = data.nbytes
    elif frame is not None:
        digest = checksum(frame)
        f.write(frame)
        stored = len(frame)
    else:
        hasher = streaming_checksum()
        stored = codecs.compress_stream(data, f.write, hasher)
        digest = hasher.intdigest()
    entry = {"offset": start, "stored": stored, "codec": codec, "checksum": digest}
    return entry, start + stored


def _stream_array(f, array: np.ndarray, position: int, digest: int | None = None) -> tuple[dict, int]:
    return drain(_stream_array_steps(f, array, position, digest))


def drain(steps):
    """Runs a generator of steps to its end; returns its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def _finish(f, position: int, encoded, index, meta) -> None:
    header = msgpack.packb(
        {"format_version": FORMAT_VERSION, "meta": meta, "tree": encoded, "arrays": index},
        use_bin_type=True,
    )
    f.write(header)
    f.write(TRAILER.pack(position, len(header), checksum(header), END_MAGIC))


def write_file(path, tree, meta: dict) -> Path:
    """Writes ``tree`` (a plain tree, see the package doc) and ``meta`` (a
    msgpack-safe dict) to ``path`` atomically. Returns the path.

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
    path = Path(path)
    arrays: list[np.ndarray] = []
    paths: list = []
    encoded = tree_codec.encode(tree, arrays, paths)
    index = []
    with atomic_write(path) as f:
        f.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0))
        position = PREAMBLE.size
        for array, where in zip(arrays, paths):
            if isinstance(array, GlobalArray):
                raise TypeError("an array spread over processes needs write_file_together")
            name = _dtype(array, where)
            entry, position = yield from _stream_array_steps(f, array, position)
            index.append({"dtype": name, "shape": list(array.shape), "nbytes": array.nbytes, **entry})
            yield
        _finish(f, position, encoded, index, meta)
    return path


# --------------------------------------------------------------------------- several processes


class Communicator(Protocol):
    """What the writer needs of the processes of a run: its rank, their
    number, and an all-gather of bytes (every process passes its bytes and
    gets everyone's, in rank order). Implemented over JAX in
    nkserde.distributed."""

    rank: int
    size: int

    def allgather(self, data: bytes) -> list[bytes]: ...


def _agree(comm: Communicator, step: str, action, path=None):
    """Runs ``action()`` here and exchanges statuses: raises on every process
    if it failed on any. Returns the action's result. An OSError (disk full,
    I/O error) becomes a FileWriteError naming ``path``."""
    result, error = None, None
    try:
        result = action()
        status = b""
    except Exception as exc:  # reported to the others, then re-raised
        if isinstance(exc, OSError) and not isinstance(exc, NkserdeError) and path is not None:
            exc = write_error(path, f"{step} on process {comm.rank}", exc)
        error = exc
        status = f"{type(exc).__name__}: {exc}".encode()[:4000] or b"error"
    statuses = comm.allgather(status)
    if error is not None:
        raise error
    failed = [(r, s.decode(errors="replace")) for r, s in enumerate(statuses) if s]
    if failed:
        rank, message = failed[0]
        where = f"{path}: " if path is not None else ""
        raise DistributedSaveError(f"{where}save failed on process {rank} while {step}: {message}")
    return result


def _strip_per_process(tree):
    """The tree with per-process subtrees reduced to their structure and
    process 0's records removed: what must be identical on every process."""
    if isinstance(tree, dict):
        if set(tree) == {tree_codec.PRIMARY}:
            return {tree_codec.PRIMARY: None}
        if set(tree) == {tree_codec.PER_PROCESS}:
            return {tree_codec.PER_PROCESS: _structure(tree[tree_codec.PER_PROCESS][0])}
        return {k: _strip_per_process(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_strip_per_process(v) for v in tree]
    return tree


def _structure(tree):
    if isinstance(tree, dict):
        if set(tree) in ({tree_codec.STACKED}, {tree_codec.ARRAY}):
            return tree
        return {k: _structure(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_structure(v) for v in tree]
    return type(tree).__name__


def _first_difference(a, b, path=()):
    if type(a) is not type(b):
        return path, a, b
    if isinstance(a, dict):
        if set(a) != set(b):
            return path, sorted(a), sorted(b)
        for k in a:
            found = _first_difference(a[k], b[k], path + (k,))
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return path, f"list of {len(a)}", f"list of {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, path + (i,))
            if found:
                return found
        return None
    return None if a == b else (path, a, b)


def _merge_per_process(tree, others):
    """Process 0's tree with each per-process subtree replaced by the list of
    every process's subtree, and process 0's records in place."""
    if isinstance(tree, dict):
        if set(tree) == {tree_codec.PRIMARY}:
            return tree[tree_codec.PRIMARY]
        if set(tree) == {tree_codec.PER_PROCESS}:
            return {tree_codec.PER_PROCESS: [o[tree_codec.PER_PROCESS][0] for o in others]}
        return {k: _merge_per_process(v, [o[k] for o in others]) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_merge_per_process(v, [o[i] for o in others]) for i, v in enumerate(tree)]
    return tree


def _prepare_block(data: memoryview) -> tuple[str, memoryview | bytes, int]:
    """A block that another process than 0 writes: its length must be known
    before writing, so a compressed block is compressed in memory (the codec
    only compresses small arrays or large near-constant ones: the frame is
    at most a few percent of a large block)."""
    codec, frame = codecs.choose_codec(data)
    if codec == codecs.ZSTD and frame is None:
        chunks: list[bytes] = []
        codecs.compress_stream(data, chunks.append, streaming_checksum())
        frame = b"".join(chunks)
    payload = data if codec == codecs.RAW else frame
    return codec, payload, checksum(payload)


def write_file_together(path, tree, meta: dict, comm: Communicator) -> Path:
    """Called by every process of a run with its own ``tree`` (numpy arrays
    for replicated values, ``GlobalArray`` for arrays spread over processes,
    ``PerProcess`` for process-local values); writes one file at ``path``
    (a directory all processes see), atomically. ``meta`` is taken from
    process 0. Returns the path on every process once the file is in place.

    Raises ProcessMismatchError if the processes disagree on a value that
    must be replicated, DistributedSaveError if a step failed elsewhere.
    """
    path = Path(path)
    rank, size = comm.rank, comm.size
    arrays: list = []
    paths: list = []

    def describe():
        deferred: list = []
        encoded = tree_codec.encode(tree, arrays, paths, rank=rank, n_processes=size, deferred=deferred)
        state["common"] = len(arrays)  # arrays every process has; then process 0's records
        tree_codec.encode_deferred(deferred, arrays, paths)
        described, mine, digests = [], {}, {}
        for i, (array, where) in enumerate(zip(arrays[: state["common"]], paths)):
            if isinstance(array, GlobalArray):
                blocks = []
                for start, block in array.blocks:
                    if rank == 0:  # streamed later, like a one-process save
                        blocks.append([list(start), list(block.shape), None, None, None])
                        mine[(i, tuple(start))] = block
                    else:
                        codec, payload, digest = _prepare_block(_bytes_of(block))
                        blocks.append([list(start), list(block.shape), len(payload), codec, digest])
                        mine[(i, tuple(start))] = (codec, payload, digest)
                described.append({"dtype": _dtype(array, where), "shape": list(array.shape), "blocks": blocks})
            else:  # replicated: written by 0, checked everywhere
                digest = checksum(_bytes_of(array))
                described.append({"dtype": _dtype(array, where), "shape": list(array.shape), "checksum": digest})
                digests[i] = digest  # process 0 need not hash it again when it writes it raw
        return encoded, described, mine, digests

    state = {}
    encoded, described, mine, digests = _agree(comm, "encoding the state", describe)
    own = msgpack.packb(
        {"tree": encoded, "arrays": described, "host": socket.gethostname(), "pid": os.getpid()}, use_bin_type=True
    )
    everyone = [msgpack.unpackb(b, raw=False, strict_map_key=False) for b in comm.allgather(own)]

    # -- the same checks and the same layout on every process
    base = _strip_per_process(everyone[0]["tree"])
    for r, other in enumerate(everyone[1:], 1):
        found = _first_difference(base, _strip_per_process(other["tree"]))
        if found:
            where, a, b = found
            raise ProcessMismatchError(
                f"{path}: {format_path(where)}: process 0 has {a!r:.120}, process {r} has {b!r:.120}; "
                "values that are not marked per-process must be the same on every process"
            )
    n_arrays = len(everyone[0]["arrays"])
    for r, other in enumerate(everyone):
        if len(other["arrays"]) != n_arrays:
            raise ProcessMismatchError(
                f"{path}: process {r} has {len(other['arrays'])} arrays, process 0 has {n_arrays}"
            )
    for i in range(n_arrays):
        first = everyone[0]["arrays"][i]
        for r, other in enumerate(everyone):
            a = other["arrays"][i]
            if (a["dtype"], a["shape"], "blocks" in a) != (first["dtype"], first["shape"], "blocks" in first):
                raise ProcessMismatchError(
                    f"{path}: {format_path(paths[i])}: process 0 has {first['dtype']}{first['shape']}, "
                    f"process {r} has {a['dtype']}{a['shape']}"
                )
            if "checksum" in a and a["checksum"] != first["checksum"]:
                raise ProcessMismatchError(
                    f"{path}: {format_path(paths[i])}: the replicated array {a['dtype']}{a['shape']} "
                    f"differs between process 0 and process {r} (checksums {first['checksum']:x} "
                    f"and {a['checksum']:x}); replicated values must be equal on every process"
                )
        if "blocks" in first:
            volume = sum(int(np.prod(b[1])) for o in everyone for b in o["arrays"][i]["blocks"])
            if volume != int(np.prod(first["shape"])):
                raise ProcessMismatchError(
                    f"{path}: {format_path(paths[i])}: the processes' blocks hold {volume} elements of "
                    f"an array of shape {first['shape']}"
                )

    # layout: others' blocks first, process order, then process 0's region
    position = PREAMBLE.size
    offsets = {}  # (rank, array, start) -> offset
    for r in range(1, size):
        for i, a in enumerate(everyone[r]["arrays"]):
            for start, _shape, stored, _codec, _digest in a.get("blocks", ()):
                offset = aligned_offset(position)
                offsets[(r, i, tuple(start))] = offset
                position = offset + stored
    region0 = aligned_offset(position)
    temp = path.parent / temp_name(path.name, everyone[0]["host"], everyone[0]["pid"])

    # -- process 0 creates the temporary file; everyone writes into it

    def create():
        if rank == 0:
            remove_stale_temps(path.parent)
            state["file"] = open(temp, "xb")
            state["file"].write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0))

    try:
        _agree(comm, "creating the temporary file", create, path)

        def write_blocks():
            if rank == 0:
                state["index"] = _write_region0(
                    state["file"], region0, arrays, everyone, offsets, mine, digests, state["common"]
                )
                return
            if not temp.exists():
                raise NkserdeError(
                    f"{temp}: process {rank} does not see the file process 0 created: the checkpoint "
                    "directory must be on a file system shared by all processes"
                )
            fd = os.open(temp, os.O_WRONLY)
            try:
                for (i, start), (codec, payload, _digest) in mine.items():
                    view = memoryview(payload)
                    offset = offsets[(rank, i, start)]
                    while view.nbytes:
                        n = os.pwrite(fd, view, offset)
                        view, offset = view[n:], offset + n
                os.fsync(fd)
            finally:
                os.close(fd)

        _agree(comm, "writing blocks", write_blocks, path)

        def publish():
            if rank == 0:
                f = state.pop("file")
                index, end = state["index"]
                meta_all = {**meta, "process_count": size}
                f.seek(end)
                _finish(f, end, _merge_per_process(everyone[0]["tree"], [o["tree"] for o in everyone]), index, meta_all)
                f.flush()
                os.fsync(f.fileno())
                f.close()
                os.replace(temp, path)
                try:
                    fsync_directory(path.parent)
                except OSError as exc:
                    raise write_error(path, "syncing the directory (fsync)", exc, untouched=False) from exc

        _agree(comm, "publishing the file", publish, path)
    finally:
        if rank == 0:
            f = state.pop("file", None)
            if f is not None:
                with contextlib.suppress(OSError):  # its unwritten buffer: the error is known
                    f.close()
            remove_temp(temp)  # gone already after a rename
    return path


def _write_region0(f, region0, arrays, everyone, offsets, mine, digests, common):
    """Process 0 streams its blocks, the replicated arrays and its own
    records (the arrays from ``common`` on) from ``region0`` on and builds
    the index of every array. Returns (index, end)."""
    index = []
    position = region0
    f.seek(region0)
    for i, array in enumerate(arrays):
        if i >= common and isinstance(array, GlobalArray):
            raise TypeError("a value recorded by process 0 alone cannot hold an array spread over processes")
        if not isinstance(array, GlobalArray):
            entry, position = _stream_array(f, array, position, digests.get(i))
            index.append({"dtype": _dtype(array), "shape": list(array.shape), "nbytes": array.nbytes, **entry})
            continue
        blocks = []
        for r, other in enumerate(everyone):
            for start, shape, stored, codec, digest in other["arrays"][i]["blocks"]:
                if r == 0:
                    entry, position = _stream_array(f, mine[(i, tuple(start))], position)
                else:
                    entry = {
                        "offset": offsets[(r, i, tuple(start))],
                        "stored": stored,
                        "codec": codec,
                        "checksum": digest,
                    }
                blocks.append({"start": start, "shape": shape, **entry})
        index.append({"dtype": everyone[0]["arrays"][i]["dtype"], "shape": list(array.shape), "blocks": blocks})
    return index, position
