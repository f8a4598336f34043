"""Writers: one streaming pass, no in-memory copy of the state.

:func:`write_file` is the one-process writer. :func:`write_file_together`
is called by every process of a multi-process run with its own part of
the state and writes one file, in two rounds of the Communicator it is
given (an error on one process raises on all of them; the coordinator
serves O(P)). The protocol, step by step, is described once, in
docs/distributed.md ("Who writes what"); :class:`_TogetherWrite` follows
it phase by phase.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Protocol

import msgpack
import numpy as np
from typing import Any, NamedTuple

from ..errors import (
    DistributedSaveError,
    NkserdeError,
    PeerLostError,
    ProcessMismatchError,
    UnregisteredTypeError,
    format_path,
    in_file,
)
from .. import nested
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
    message; ``writing``: bytes the processes write before they all arrive,
    which the wait allows for). :class:`nkserde.processes.coordination.Group` over
    JAX's coordination service in nkserde.processes.jax_service."""

    rank: int
    size: int

    def round(self, message: bytes, decide, *, what: str, writing: int = 0) -> bytes: ...


class ArrayInfo(NamedTuple):
    """What every process must agree on about an array: dtype, shape, and
    the checksum of a replicated one (None for one spread over processes)."""

    dtype: str
    shape: list
    checksum: int | None


class OwnBlock(NamedTuple):
    """A block process 0 holds: streamed with its region, as a one-process
    save streams an array."""

    array: int
    start: tuple
    data: np.ndarray


class PreparedBlock(NamedTuple):
    """A block another process holds: encoded before the first round (its
    stored size goes in the message), written at its offset in the second."""

    array: int
    start: tuple
    shape: list
    codec: str
    payload: Any
    checksum: int


class BlockNote(NamedTuple):
    """A block as round 1's message tells process 0 of it (a list on the
    wire): which array, where, its shape and, from the other processes, how
    it is stored."""

    array: int
    start: list
    shape: list
    stored: int | None = None
    codec: str | None = None
    checksum: int | None = None


class _Encoded(NamedTuple):
    """This process's state, encoded: the header tree, its arrays (the
    first ``common`` every process has, then process 0's own records), what
    must agree, the blocks it writes."""

    tree: Any
    arrays: list
    paths: list
    common: int
    described: list[ArrayInfo]
    agreed: dict
    nbytes: int
    own_blocks: list  # OwnBlock (process 0) or PreparedBlock (the others)
    replicated_checksums: dict  # array -> checksum, so process 0 need not hash them again


class _Layout(NamedTuple):
    """Process 0's plan after the first round: every process's message, the
    offsets of the other processes' blocks (by rank), where its own region
    starts."""

    messages: list
    offsets: list
    region0: int


def _agreed_part(encoded, described: list[ArrayInfo]) -> dict:
    """What must be identical on every process: the tree without its
    per-process values and process 0's records, and each array's dtype,
    shape and kind (the checksum of a replicated one)."""
    return {"tree": _strip_per_process(encoded), "arrays": [list(a) for a in described]}


def _digest(agreed) -> bytes:
    return hashlib.sha256(msgpack.packb(agreed, use_bin_type=True)).digest()[:16]


def _marker(node, key: str) -> bool:
    return isinstance(node, dict) and set(node) == {key}


def _per_process_or_primary(node) -> bool:
    """A per-process value or process 0's record: where the processes'
    encoded trees may differ."""
    return _marker(node, tree_codec.PER_PROCESS) or _marker(node, tree_codec.PRIMARY)


def _strip_per_process(tree):
    """The tree with per-process subtrees reduced to their structure and
    process 0's records removed: what must be identical on every process."""

    def strip(node):
        if _marker(node, tree_codec.PRIMARY):
            return {tree_codec.PRIMARY: None}
        if _marker(node, tree_codec.PER_PROCESS):
            return {tree_codec.PER_PROCESS: _structure(node[tree_codec.PER_PROCESS][0])}
        return node

    return nested.map_leaves(strip, tree, is_leaf=_per_process_or_primary)


def _structure(tree):
    """Array references kept, any other leaf as its type's name."""
    return nested.map_leaves(
        lambda node: node if isinstance(node, dict) else type(node).__name__,
        tree,
        is_leaf=lambda node: _marker(node, tree_codec.STACKED) or _marker(node, tree_codec.ARRAY),
    )


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


def _per_process_values(tree) -> list:
    """This process's per-process subtrees, in the tree's order."""
    return [
        node[tree_codec.PER_PROCESS][0]
        for _, node in nested.leaves(tree, _outside_per_process_or_primary)
        if _marker(node, tree_codec.PER_PROCESS)
    ]


def _outside_per_process_or_primary(node):
    return () if _per_process_or_primary(node) else nested.entries(node)


def _merge_per_process(tree, per_process: list[list]):
    """Process 0's tree with each per-process subtree replaced by the list
    of every process's (``per_process[r]``: process r's, in tree order),
    and process 0's records in place."""
    position = itertools.count()

    def merge(node):
        if _marker(node, tree_codec.PRIMARY):
            return node[tree_codec.PRIMARY]
        if _marker(node, tree_codec.PER_PROCESS):
            k = next(position)
            return {tree_codec.PER_PROCESS: [values[k] for values in per_process]}
        return node

    return nested.map_leaves(merge, tree, is_leaf=_per_process_or_primary)


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
    """One process's part of :func:`write_file_together`, step by step: round
    1 (:meth:`_agree_on_layout`) then round 2 (:meth:`_write_and_publish`);
    what each phase makes is a record (:class:`_Encoded`, :class:`_Layout`)
    passed to the next."""

    def __init__(self, path: Path, tree, meta: dict, comm: Communicator):
        self.path, self.tree, self.meta, self.comm = path, tree, meta, comm
        self.rank, self.size = comm.rank, comm.size
        self.encoded: _Encoded | None = None  # round 1's input, kept for naming a difference and publishing
        self.layout: _Layout | None = None  # process 0's, from round 1
        self.file = None  # process 0's temporary file while it is written
        self.temp: Path | None = None
        self.region: tuple[list, int] | None = None  # process 0's (index, end) once its region is written

    def steps(self):
        """The write as a generator of steps (rounds, and pieces of at most
        ``codecs.CHUNK`` bytes of process 0's region), returning the path:
        a background write that falls behind is finished by the run's
        thread."""
        try:
            answer = self._agree_on_layout()
            self.temp = self.path.parent / answer["temp"]
            yield
            yield from self._write_and_publish(answer["starts"])
        finally:
            if self.rank == 0:
                if self.file is not None:
                    with contextlib.suppress(OSError):  # its unwritten buffer: the error is known
                        self.file.close()
                if self.temp is not None:
                    remove_temp(self.temp)  # gone already after a rename
        return self.path

    # -- round 1: encode, describe, check, lay out, create

    def _encode(self) -> _Encoded:
        arrays, paths, deferred = [], [], []
        tree = tree_codec.encode(self.tree, arrays, paths, rank=self.rank, n_processes=self.size, deferred=deferred)
        common = len(arrays)  # arrays every process has; then process 0's records
        tree_codec.encode_deferred(deferred, arrays, paths)
        described, own_blocks, replicated = [], [], {}
        for i, (array, where) in enumerate(zip(arrays[:common], paths)):
            if isinstance(array, GlobalArray):
                for start, block in array.blocks:
                    start = tuple(int(s) for s in start)
                    if self.rank == 0:  # streamed later, like a one-process save
                        own_blocks.append(OwnBlock(i, start, block))
                    else:
                        own_blocks.append(PreparedBlock(i, start, list(block.shape), *_prepare_block(_bytes_of(block))))
                described.append(ArrayInfo(_dtype(array, where), list(array.shape), None))
            else:  # replicated: written by 0, checked everywhere
                digest = checksum(_bytes_of(array))
                described.append(ArrayInfo(_dtype(array, where), list(array.shape), digest))
                replicated[i] = digest
        nbytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in arrays)
        agreed = _agreed_part(tree, described)
        return _Encoded(tree, arrays, paths, common, described, agreed, nbytes, own_blocks, replicated)

    def _describe(self) -> dict:
        self.encoded = encoded = self._encode()
        blocks = [  # process 0's own: where only (it streams them); the others': how they are stored too
            [b.array, list(b.start), list(b.data.shape)]
            if isinstance(b, OwnBlock)
            else list(BlockNote(b.array, list(b.start), b.shape, len(b.payload), b.codec, b.checksum))
            for b in encoded.own_blocks
        ]
        return {"digest": _digest(encoded.agreed), "blocks": blocks, "per_process": _per_process_values(encoded.tree)}

    def _agree_on_layout(self) -> dict:
        what = "encoding the state"
        try:
            message, error = self._describe(), None
        except Exception as exc:  # reported to the others, then re-raised
            message, error = {"error": _error_message(exc)}, exc
        answer = self._round(message, self._check_and_lay_out, what, error)
        if "differs" in answer:  # the first process that differs sends its details: process 0 names the path
            rank = answer["differs"]
            detail = msgpack.packb(self.encoded.agreed, use_bin_type=True) if self.rank == rank else b""
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
        encoded = self.encoded
        volume: dict[int, int] = {}
        for m in messages:
            for note in map(_note, m["blocks"]):
                i = note.array
                if not (0 <= i < encoded.common and encoded.described[i].checksum is None):
                    raise ProcessMismatchError(f"{self.path}: a process sent a block of array {i}, not a spread array")
                volume[i] = volume.get(i, 0) + int(np.prod(note.shape))
        for i, a in enumerate(encoded.described):
            if a.checksum is None and volume.get(i, 0) != int(np.prod(a.shape)):
                raise ProcessMismatchError(
                    f"{self.path}: {format_path(encoded.paths[i])}: the processes' blocks hold "
                    f"{volume.get(i, 0)} elements of an array of shape {a.shape}"
                )
        # others' blocks first, in process order, then process 0's region
        position = PREAMBLE.size
        starts, offsets = [0], [None]
        for m in messages[1:]:
            position = aligned_offset(position)
            starts.append(position)
            placed, position = _block_offsets(position, [_note(b).stored for b in m["blocks"]])
            offsets.append(placed)
        self.layout = _Layout(messages, offsets, aligned_offset(position))
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
        agreed, paths = self.encoded.agreed, self.encoded.paths
        found = _first_difference(agreed["tree"], other["tree"])
        if found:
            where, a, b = found
            raise ProcessMismatchError(
                f"{self.path}: {format_path(where)}: process 0 has {a!r:.120}, process {rank} has {b!r:.120}; "
                "values that are not marked per-process must be the same on every process"
            )
        mine, theirs = [ArrayInfo(*a) for a in agreed["arrays"]], [ArrayInfo(*a) for a in other["arrays"]]
        if len(mine) != len(theirs):
            raise ProcessMismatchError(
                f"{self.path}: process {rank} has {len(theirs)} arrays, process 0 has {len(mine)}"
            )
        for i, (a, b) in enumerate(zip(mine, theirs)):
            if (a.dtype, a.shape) != (b.dtype, b.shape) or (a.checksum is None) != (b.checksum is None):
                raise ProcessMismatchError(
                    f"{self.path}: {format_path(paths[i])}: process 0 has {a.dtype}{a.shape}, "
                    f"process {rank} has {b.dtype}{b.shape}"
                )
            if a.checksum != b.checksum:
                raise ProcessMismatchError(
                    f"{self.path}: {format_path(paths[i])}: the replicated array {a.dtype}{a.shape} differs between "
                    f"process 0 and process {rank} (checksums {a.checksum:x} and {b.checksum:x}); replicated values "
                    "must be equal on every process"
                )
        raise ProcessMismatchError(f"{self.path}: process {rank}'s state differs from process 0's")

    # -- round 2: write, then process 0 publishes

    def _write_and_publish(self, starts: list[int]):
        what = "writing blocks"
        try:
            if self.rank:
                self._write_own_blocks(starts[self.rank])
            else:
                self.region = yield from self._write_region0()
            message, error = {}, None
        except Exception as exc:
            if isinstance(exc, OSError) and not isinstance(exc, NkserdeError):
                exc = write_error(self.path, f"{what} on process {self.rank}", exc)
            message, error = {"error": _error_message(exc)}, exc
        yield
        self._round(message, self._publish, what, error, writing=self.encoded.nbytes)

    def _write_own_blocks(self, start: int):
        if not self.temp.exists():
            raise NkserdeError(
                f"{self.temp}: process {self.rank} does not see the file process 0 created: the checkpoint "
                "directory must be on a file system shared by all processes"
            )
        blocks: list[PreparedBlock] = self.encoded.own_blocks
        offsets, _ = _block_offsets(start, [len(b.payload) for b in blocks])
        fd = os.open(self.temp, os.O_WRONLY)
        try:
            for block, offset in zip(blocks, offsets):
                view = memoryview(block.payload)
                while view.nbytes:
                    n = os.pwrite(fd, view, offset)
                    view, offset = view[n:], offset + n
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_region0(self):
        layout, encoded = self.layout, self.encoded
        others: dict[int, list] = {}  # array -> index entries of the other processes' blocks, in process order
        for r, m in enumerate(layout.messages[1:], 1):
            for note, offset in zip(map(_note, m["blocks"]), layout.offsets[r]):
                others.setdefault(note.array, []).append(
                    {
                        "start": note.start,
                        "shape": note.shape,
                        "offset": offset,
                        "stored": note.stored,
                        "codec": note.codec,
                        "checksum": note.checksum,
                    }
                )
        return (
            yield from _write_region0_steps(
                self.file,
                layout.region0,
                encoded.arrays,
                others,
                encoded.own_blocks,
                encoded.replicated_checksums,
                encoded.common,
            )
        )

    def _publish(self, messages: list[dict]) -> dict:
        self._raise_first_error(messages, "writing blocks")
        f, self.file = self.file, None
        index, end = self.region
        try:
            meta_all = {**self.meta, "process_count": self.size}
            f.seek(end)
            merged = _merge_per_process(self.encoded.tree, [m["per_process"] for m in self.layout.messages])
            _finish(f, end, merged, index, meta_all)
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

    def _round(self, message: dict, decide, what, error=None, writing: int = 0):
        """A round of msgpack messages; a process that failed here raises its
        own error, the others the one process 0 decided."""

        def decide_bytes(raw: list[bytes]) -> bytes:
            return msgpack.packb(decide([msgpack.unpackb(m, raw=False, strict_map_key=False) for m in raw]))

        answer = self._round_bytes(msgpack.packb(message, use_bin_type=True), decide_bytes, what, error, writing)
        return msgpack.unpackb(answer, raw=False, strict_map_key=False)

    def _round_bytes(self, message: bytes, decide, what, error=None, writing: int = 0) -> bytes:
        try:
            return self.comm.round(message, decide, what=what, writing=writing)
        except Exception as exc:
            if error is not None and not isinstance(exc, PeerLostError):
                raise error from None  # this process's own error, not process 0's report of it
            if isinstance(exc, NkserdeError):
                raise in_file(exc, self.path) from None  # PeerLostError keeps its missing ranks
            raise


def _note(raw: list) -> BlockNote:
    """A :class:`BlockNote` from a round-1 message (process 0's own list it
    made, or one another process sent: its fields checked by their use)."""
    return BlockNote(*raw)


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
    for block in own_blocks:  # OwnBlock
        mine.setdefault(block.array, []).append((block.start, block.data))
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
