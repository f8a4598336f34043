"""Writers: one streaming pass, no in-memory copy of the state.

:func:`write_file` is the one-process writer. :func:`write_file_together`
is called by every process of a multi-process run with its own part of
the state and writes one file (see docs/distributed.md for the protocol):

1. every process encodes its tree, prepares the blocks it owns (process 0:
   replicated arrays and its own blocks; others: their blocks of global and
   stacked arrays, compressed in memory if they compress) and sends process
   0 a digest of what must agree (the tree without per-process values,
   array dtypes and shapes, checksums of its copies of the replicated
   arrays), its blocks' sizes and checksums and its per-process values;
2. process 0 checks: equal digests (else the first process that differs
   sends the full description in one more round and every process raises
   ProcessMismatchError naming the path), blocks that tile each array;
   lays out the file (the others' blocks first, in process order, then
   process 0's region, which it streams: its compressed lengths need not
   be known), creates the temporary file and answers with each process's
   start;
3. every process writes its blocks at their offsets and fsyncs;
4. process 0 writes header and trailer, fsyncs, renames, fsyncs the
   directory; every process returns only after that.

Steps 1-2 and 3-4 are each one round of the Communicator (a gather at
process 0 and one answer), so an error on one process raises on all of
them instead of leaving some waiting, and the coordinator serves O(P).
"""

from __future__ import annotations

import contextlib
import hashlib
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
    PeerLostError,
    ProcessMismatchError,
    UnregisteredTypeError,
    format_path,
)
from ..coordination import write_timeout
from ..placement import GlobalArray
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
    number, and rounds through process 0 (every process sends a message,
    process 0's ``decide(messages)`` gives every process the same answer or
    raises there, and then the others raise DistributedSaveError with its
    message). :class:`nkserde.coordination.Group` over JAX's coordination
    service in nkserde.distributed."""

    rank: int
    size: int
    timeout: float

    def round(self, message: bytes, decide, *, what: str, timeout: float | None = None) -> bytes: ...


def _agreed_part(encoded, described) -> dict:
    """What must be identical on every process: the tree without its
    per-process values and process 0's records, and each array's dtype,
    shape and kind (the checksum of a replicated one)."""
    return {
        "tree": _strip_per_process(encoded),
        "arrays": [[a["dtype"], a["shape"], a.get("checksum", "blocks")] for a in described],
    }


def _digest(agreed) -> bytes:
    return hashlib.sha256(msgpack.packb(agreed, use_bin_type=True)).digest()[:16]


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


def _per_process_values(tree, out=None) -> list:
    """This process's per-process subtrees, in the tree's order."""
    out = [] if out is None else out
    if isinstance(tree, dict):
        if set(tree) == {tree_codec.PER_PROCESS}:
            out.append(tree[tree_codec.PER_PROCESS][0])
        elif set(tree) != {tree_codec.PRIMARY}:
            for v in tree.values():
                _per_process_values(v, out)
    elif isinstance(tree, list):
        for v in tree:
            _per_process_values(v, out)
    return out


def _merge_per_process(tree, per_process: list[list]):
    """Process 0's tree with each per-process subtree replaced by the list
    of every process's (``per_process[r]``: process r's, in tree order),
    and process 0's records in place."""
    position = iter(range(10**12))

    def merge(node):
        if isinstance(node, dict):
            if set(node) == {tree_codec.PRIMARY}:
                return node[tree_codec.PRIMARY]
            if set(node) == {tree_codec.PER_PROCESS}:
                k = next(position)
                return {tree_codec.PER_PROCESS: [values[k] for values in per_process]}
            return {key: merge(v) for key, v in node.items()}
        if isinstance(node, list):
            return [merge(v) for v in node]
        return node

    return merge(tree)


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


def _block_offsets(start: int, stored_sizes) -> tuple[list[int], int]:
    """Aligned offsets of blocks of ``stored_sizes`` laid out from ``start``;
    and the end. Process 0 and the block's owner compute the same."""
    offsets = []
    for stored in stored_sizes:
        start = aligned_offset(start)
        offsets.append(start)
        start += stored
    return offsets, start


def _error_message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:4000] or "error"


def write_file_together(path, tree, meta: dict, comm: Communicator) -> Path:
    """Called by every process of a run with its own ``tree`` (numpy arrays
    for replicated values, ``GlobalArray`` for arrays spread over processes,
    ``PerProcess`` for process-local values); writes one file at ``path``
    (a directory all processes see), atomically. ``meta`` is taken from
    process 0. Returns the path on every process once the file is in place.

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
    return (yield from _TogetherWrite(Path(path), tree, meta, comm).steps())


class _TogetherWrite:
    """One process's part of :func:`write_file_together`, step by step."""

    def __init__(self, path: Path, tree, meta: dict, comm: Communicator):
        self.path, self.tree, self.meta, self.comm = path, tree, meta, comm
        self.rank, self.size = comm.rank, comm.size
        self.arrays: list = []
        self.paths: list = []
        self.own_blocks: list = []  # rank 0: [(i, start, block)]; others: [(i, start, codec, payload, checksum)]
        self.replicated_checksums: dict[int, int] = {}
        self.file = None  # process 0's temporary file while it is written
        self.temp: Path | None = None

    def steps(self):
        """The write as a generator of steps (rounds, and pieces of at most
        ``codecs.CHUNK`` bytes of process 0's region), returning the path:
        a background write that falls behind is finished by the run's
        thread."""
        try:
            layout = self._agree_on_layout()
            self.temp = self.path.parent / layout["temp"]
            yield
            yield from self._write_and_publish(layout)
        finally:
            if self.rank == 0:
                if self.file is not None:
                    with contextlib.suppress(OSError):  # its unwritten buffer: the error is known
                        self.file.close()
                if self.temp is not None:
                    remove_temp(self.temp)  # gone already after a rename
        return self.path

    # -- round 1: encode, describe, check, lay out, create

    def _describe(self) -> dict:
        deferred: list = []
        encoded = tree_codec.encode(
            self.tree, self.arrays, self.paths, rank=self.rank, n_processes=self.size, deferred=deferred
        )
        self.common = len(self.arrays)  # arrays every process has; then process 0's records
        tree_codec.encode_deferred(deferred, self.arrays, self.paths)
        described, blocks = [], []
        for i, (array, where) in enumerate(zip(self.arrays[: self.common], self.paths)):
            if isinstance(array, GlobalArray):
                for start, block in array.blocks:
                    start = [int(s) for s in start]
                    if self.rank == 0:  # streamed later, like a one-process save
                        self.own_blocks.append((i, tuple(start), block))
                        blocks.append([i, start, list(block.shape)])
                    else:
                        codec, payload, digest = _prepare_block(_bytes_of(block))
                        self.own_blocks.append((i, tuple(start), codec, payload, digest))
                        blocks.append([i, start, list(block.shape), len(payload), codec, digest])
                described.append({"dtype": _dtype(array, where), "shape": list(array.shape)})
            else:  # replicated: written by 0, checked everywhere
                digest = checksum(_bytes_of(array))
                described.append({"dtype": _dtype(array, where), "shape": list(array.shape), "checksum": digest})
                self.replicated_checksums[i] = digest  # process 0 need not hash it again
        self.encoded, self.described = encoded, described
        self.agreed = _agreed_part(encoded, described)
        self.nbytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in self.arrays)
        return {"digest": _digest(self.agreed), "blocks": blocks, "per_process": _per_process_values(encoded)}

    def _agree_on_layout(self) -> dict:
        what = "encoding the state"
        try:
            message, error = self._describe(), None
        except Exception as exc:  # reported to the others, then re-raised
            message, error = {"error": _error_message(exc)}, exc
        answer = self._round(message, self._check_and_lay_out, what, error)
        if "differs" in answer:  # the first process that differs sends its details: process 0 names the path
            rank = answer["differs"]
            detail = msgpack.packb(self.agreed, use_bin_type=True) if self.rank == rank else b""
            self._round_bytes(detail, lambda details: self._name_difference(rank, details[rank]), what)
            raise AssertionError("unreachable: naming the difference raises on every process")  # pragma: no cover
        return answer

    def _check_and_lay_out(self, messages: list[dict]) -> dict:
        """Process 0: every process's description checked against its own,
        the file laid out and created."""
        self._raise_first_error(messages, "encoding the state")
        mine = messages[0]["digest"]
        for r, m in enumerate(messages):
            if m["digest"] != mine:
                return {"differs": r}
        self.messages = messages
        volume: dict[int, int] = {}
        for m in messages:
            for block in m["blocks"]:
                i, shape = block[0], block[2]
                if not (0 <= i < self.common and "checksum" not in self.described[i]):
                    raise ProcessMismatchError(f"{self.path}: a process sent a block of array {i}, not a spread array")
                volume[i] = volume.get(i, 0) + int(np.prod(shape))
        for i, a in enumerate(self.described):
            if "checksum" not in a and volume.get(i, 0) != int(np.prod(a["shape"])):
                raise ProcessMismatchError(
                    f"{self.path}: {format_path(self.paths[i])}: the processes' blocks hold "
                    f"{volume.get(i, 0)} elements of an array of shape {a['shape']}"
                )
        # others' blocks first, in process order, then process 0's region
        position = PREAMBLE.size
        starts = [0]
        self.offsets = [None]
        for m in messages[1:]:
            position = aligned_offset(position)
            starts.append(position)
            offsets, position = _block_offsets(position, [b[3] for b in m["blocks"]])
            self.offsets.append(offsets)
        self.region0 = aligned_offset(position)
        temp = temp_name(self.path.name, socket.gethostname(), os.getpid())
        self._create(self.path.parent / temp)
        return {"starts": starts, "temp": temp}

    def _create(self, temp: Path):
        try:
            remove_stale_temps(self.path.parent)
            self.temp = temp
            self.file = open(temp, "xb")
            self.file.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0))
        except OSError as exc:
            raise write_error(self.path, "creating the temporary file on process 0", exc) from exc

    def _name_difference(self, rank: int, detail: bytes):
        other = msgpack.unpackb(detail, raw=False, strict_map_key=False)
        found = _first_difference(self.agreed["tree"], other["tree"])
        if found:
            where, a, b = found
            raise ProcessMismatchError(
                f"{self.path}: {format_path(where)}: process 0 has {a!r:.120}, process {rank} has {b!r:.120}; "
                "values that are not marked per-process must be the same on every process"
            )
        mine, theirs = self.agreed["arrays"], other["arrays"]
        if len(mine) != len(theirs):
            raise ProcessMismatchError(
                f"{self.path}: process {rank} has {len(theirs)} arrays, process 0 has {len(mine)}"
            )
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if a[:2] != b[:2] or (a[2] == "blocks") != (b[2] == "blocks"):
                raise ProcessMismatchError(
                    f"{self.path}: {format_path(self.paths[i])}: process 0 has {a[0]}{a[1]}, "
                    f"process {rank} has {b[0]}{b[1]}"
                )
            if a[2] != b[2]:
                raise ProcessMismatchError(
                    f"{self.path}: {format_path(self.paths[i])}: the replicated array {a[0]}{a[1]} differs between "
                    f"process 0 and process {rank} (checksums {a[2]:x} and {b[2]:x}); replicated values must be "
                    "equal on every process"
                )
        raise ProcessMismatchError(f"{self.path}: process {rank}'s state differs from process 0's")

    # -- round 2: write, then process 0 publishes

    def _write_and_publish(self, layout: dict):
        what = "writing blocks"
        try:
            if self.rank:
                self._write_own_blocks(layout["starts"][self.rank])
            else:
                yield from self._write_region0()
            message, error = {}, None
        except Exception as exc:
            if isinstance(exc, OSError) and not isinstance(exc, NkserdeError):
                exc = write_error(self.path, f"{what} on process {self.rank}", exc)
            message, error = {"error": _error_message(exc)}, exc
        yield
        timeout = write_timeout(self.comm.timeout, self.nbytes)
        self._round(message, self._publish, what, error, timeout=timeout)

    def _write_own_blocks(self, start: int):
        if not self.temp.exists():
            raise NkserdeError(
                f"{self.temp}: process {self.rank} does not see the file process 0 created: the checkpoint "
                "directory must be on a file system shared by all processes"
            )
        offsets, _ = _block_offsets(start, [len(payload) for *_, payload, _digest in self.own_blocks])
        fd = os.open(self.temp, os.O_WRONLY)
        try:
            for (_i, _start, _codec, payload, _digest), offset in zip(self.own_blocks, offsets):
                view = memoryview(payload)
                while view.nbytes:
                    n = os.pwrite(fd, view, offset)
                    view, offset = view[n:], offset + n
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_region0(self):
        others: dict[int, list] = {}  # array -> index entries of the other processes' blocks, in process order
        for r, m in enumerate(self.messages[1:], 1):
            for (i, start, shape, stored, codec, digest), offset in zip(m["blocks"], self.offsets[r]):
                entry = {"start": start, "shape": shape, "offset": offset, "stored": stored, "codec": codec}
                others.setdefault(i, []).append({**entry, "checksum": digest})
        self.index, self.end = yield from _write_region0_steps(
            self.file, self.region0, self.arrays, others, self.own_blocks, self.replicated_checksums, self.common
        )

    def _publish(self, messages: list[dict]) -> dict:
        self._raise_first_error(messages, "writing blocks")
        f, self.file = self.file, None
        try:
            meta_all = {**self.meta, "process_count": self.size}
            f.seek(self.end)
            merged = _merge_per_process(self.encoded, [m["per_process"] for m in self.messages])
            _finish(f, self.end, merged, self.index, meta_all)
            f.flush()
            os.fsync(f.fileno())
            f.close()
        except OSError as exc:
            with contextlib.suppress(OSError):
                f.close()
            raise write_error(self.path, "publishing the file on process 0", exc) from exc
        os.replace(self.temp, self.path)
        try:
            fsync_directory(self.path.parent)
        except OSError as exc:
            raise write_error(self.path, "syncing the directory (fsync)", exc, untouched=False) from exc
        return {}

    # -- rounds

    def _raise_first_error(self, messages, what):
        failed = [(r, m["error"]) for r, m in enumerate(messages) if "error" in m]
        if failed:
            rank, message = failed[0]
            raise DistributedSaveError(f"{self.path}: save failed on process {rank} while {what}: {message}")

    def _round(self, message: dict, decide, what, error=None, timeout=None):
        """A round of msgpack messages; a process that failed here raises its
        own error, the others the one process 0 decided."""

        def decide_bytes(raw: list[bytes]) -> bytes:
            return msgpack.packb(decide([msgpack.unpackb(m, raw=False, strict_map_key=False) for m in raw]))

        answer = self._round_bytes(msgpack.packb(message, use_bin_type=True), decide_bytes, what, error, timeout)
        return msgpack.unpackb(answer, raw=False, strict_map_key=False)

    def _round_bytes(self, message: bytes, decide, what, error=None, timeout=None) -> bytes:
        try:
            return self.comm.round(message, decide, what=what, timeout=timeout)
        except Exception as exc:
            if error is not None and not isinstance(exc, PeerLostError):
                raise error from None  # this process's own error, not process 0's report of it
            if isinstance(exc, PeerLostError):
                raise PeerLostError(f"{self.path}: {exc}", missing=exc.missing) from None
            if isinstance(exc, NkserdeError) and not str(exc).startswith(str(self.path)):
                raise type(exc)(f"{self.path}: {exc}") from None
            raise


def _write_region0_steps(f, region0, arrays, others, own_blocks, checksums, common):
    """Process 0 streams its blocks, the replicated arrays and its own
    records (the arrays from ``common`` on) from ``region0`` on and builds
    the index of every array: a spread array's blocks in process order
    (process 0's, then ``others[i]``: the index entries of the other
    processes' blocks of array i). Returns (index, end)."""
    index = []
    position = region0
    f.seek(region0)
    mine: dict[int, list] = {}
    for i, start, block in own_blocks:
        mine.setdefault(i, []).append((start, block))
    for i, array in enumerate(arrays):
        if i >= common and isinstance(array, GlobalArray):
            raise TypeError("a value recorded by process 0 alone cannot hold an array spread over processes")
        if not isinstance(array, GlobalArray):
            entry, position = yield from _stream_array_steps(f, array, position, checksums.get(i))
            index.append({"dtype": _dtype(array), "shape": list(array.shape), "nbytes": array.nbytes, **entry})
            continue
        blocks = []
        for start, block in mine.get(i, ()):
            entry, position = yield from _stream_array_steps(f, block, position)
            blocks.append({"start": list(start), "shape": list(block.shape), **entry})
        blocks += others.get(i, [])
        index.append({"dtype": _dtype(array), "shape": list(array.shape), "blocks": blocks})
    return index, position
