"""One process's part of a save by every process of a run
(nkserde.format.writer.write_file_together), step by step, in three rounds
through process 0 (docs/distributed.md, "Who writes what"): round 1
encodes, describes, checks and lays out the file (the plan in
nkserde.format.together_layout, the agreement in
nkserde.format.together_agreement); then the other processes write their
blocks, each from a page of its own, and fsync them (round 2); then
process 0 writes its region and publishes the file (round 3 tells the
others how it went).

Process 0 writes nothing into the file before round 2: a shared file
system's client cache may fill the gap below a write with zeros and write
whole pages back (FUSE-based file systems; LazyFS, the tests' model of a
node's cache, does), which would overwrite the blocks another node wrote
and fsynced. After round 2 those blocks are on the file server, so what
process 0's node reads back or fills in holds them."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Protocol

import msgpack

from ..errors import DistributedSaveError, NkserdeError, PeerLostError, in_file
from ..types.placement import GlobalArray
from .array_write import stored_dtype, stream_array_steps
from .atomic import fsync_directory, remove_stale_temps, remove_temp, temp_name, write_error
from .header import write_header
from .layout import FORMAT_VERSION, MAGIC, PREAMBLE
from .together_agreement import agreed_digest, merge_per_process, name_difference, per_process_values
from .together_layout import (
    BlockNote,
    Encoded,
    Layout,
    OwnBlock,
    PreparedBlock,
    block_note,
    block_offsets,
    encode_part,
    lay_out,
)


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


def _error_message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:4000] or "error"


class TogetherWrite:
    """One process's part of :func:`nkserde.format.writer.write_file_together`,
    in the three stages of a write (nkserde/format/writer.py): :meth:`encode`
    of this process's tree is round 1 (:meth:`_agree_on_layout`),
    :meth:`write` round 2 and process 0's region, :meth:`commit` round 3
    (process 0 publishes the file); what each phase makes is a record
    (:class:`Encoded`, :class:`Layout`) passed to the next. Used as a
    context manager: process 0's temporary file is removed unless the file
    was published."""

    def __init__(self, path: Path, meta: dict, comm: Communicator):
        self.path, self.meta, self.comm = path, meta, comm
        self.rank, self.size = comm.rank, comm.size
        self.encoded: Encoded | None = None  # round 1's input, kept for naming a difference and publishing
        self.layout: Layout | None = None  # process 0's, from round 1
        self.file = None  # process 0's temporary file while it is written
        self.temp: Path | None = None
        self.region: tuple[list, int] | None = None  # process 0's (index, end) once its region is written
        self.answer: dict | None = None  # process 0's answer to round 1: where each process writes
        self.outcome: tuple[dict, BaseException | None] = ({}, None)  # process 0's region: round 3's message

    def encode(self, tree) -> None:
        """Round 1: each process encodes its part, ``tree``, process 0
        checks that they agree, lays out the file and creates it."""
        self.answer = self._agree_on_layout(tree)
        self.temp = self.path.parent / self.answer["temp"]

    def write(self):
        """Steps: round 2 (the other processes write their blocks and
        fsync them), then process 0 writes its region in pieces of at most
        ``codecs.CHUNK`` bytes (a background write that falls behind is
        finished by the run's thread)."""
        yield
        self._write_blocks(self.answer["starts"])
        yield
        yield from self._write_region()
        yield

    def commit(self) -> Path:
        """Round 3: process 0 publishes the file (or every process raises
        the error of the one that failed). Returns the path."""
        message, error = self.outcome
        self._round(message, self._publish, "writing process 0's region", error, writing=self.answer["region0_bytes"])
        return self.path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.rank == 0:
            if self.file is not None:
                with contextlib.suppress(OSError):  # its unwritten buffer: the error is known
                    self.file.close()
            if self.temp is not None:
                remove_temp(self.temp)  # gone already after a rename
        return False

    # -- round 1: encode, describe, check, lay out, create

    def _round_1_part(self, tree) -> dict:
        self.encoded = encoded = encode_part(tree, self.rank, self.size)
        blocks = [  # process 0's own: where only (it streams them); the others': how they are stored too
            [b.array, list(b.start), list(b.data.shape)]
            if isinstance(b, OwnBlock)
            else list(BlockNote(b.array, list(b.start), b.shape, len(b.payload), b.codec, b.checksum))
            for b in encoded.own_blocks
        ]
        return {
            "digest": agreed_digest(encoded.agreed),
            "blocks": blocks,
            "per_process": per_process_values(encoded.tree),
        }

    def _agree_on_layout(self, tree) -> dict:
        what = "encoding the state"
        try:
            message, error = self._round_1_part(tree), None
        except Exception as exc:  # noqa: BLE001  (reported to the others, who would wait for ever, then re-raised)
            message, error = {"error": _error_message(exc)}, exc
        answer = self._round(message, self._check_and_lay_out, what, error)
        if "differs" in answer:  # the first process that differs sends its details: process 0 names the path
            rank = answer["differs"]
            agreed, paths = self.encoded.agreed, self.encoded.paths
            detail = msgpack.packb(agreed, use_bin_type=True) if self.rank == rank else b""
            self._round_bytes(
                detail, lambda details: name_difference(self.path, agreed, paths, rank, details[rank]), what
            )
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
        self.layout, starts = lay_out(self.path, self.encoded, messages)
        temp = temp_name(self.path.name, socket.gethostname(), os.getpid())
        self._create(self.path.parent / temp)
        return {"starts": starts, "temp": temp, "region0_bytes": self.encoded.nbytes}

    def _create(self, temp: Path):
        """The temporary file, empty: process 0 writes into it after round 2."""
        try:
            remove_stale_temps(self.path.parent)
            self.temp = temp
            self.file = open(temp, "xb")
        except OSError as exc:
            raise write_error(self.path, "creating the temporary file on process 0", exc) from exc

    # -- round 2: the other processes write their blocks

    def _write_blocks(self, starts: list[int]):
        what = "writing blocks"
        try:
            if self.rank:
                self._write_own_blocks(starts[self.rank])
            message, error = {}, None
        except Exception as exc:  # noqa: BLE001  (reported to the others, who would wait for ever, then re-raised)
            if isinstance(exc, OSError) and not isinstance(exc, NkserdeError):
                exc = write_error(self.path, f"{what} on process {self.rank}", exc)
            message, error = {"error": _error_message(exc)}, exc
        self._round(message, lambda messages: self._raise_first_error(messages, what) or {}, what, error,
                    writing=self.encoded.nbytes)  # fmt: skip

    # -- then process 0 writes its region; round 3 publishes the file

    def _write_region(self):
        """Process 0's region, written; its error (any process's own, in
        round 3) kept for :meth:`commit` to tell the others."""
        if self.rank != 0:
            return
        try:
            self.region = yield from self._write_region0()
        except Exception as exc:  # noqa: BLE001  (reported to the others, who would wait for ever, then re-raised)
            if isinstance(exc, OSError) and not isinstance(exc, NkserdeError):
                exc = write_error(self.path, "writing process 0's region", exc)
            self.outcome = ({"error": _error_message(exc)}, exc)

    def _write_own_blocks(self, start: int):
        if not self.temp.exists():
            raise NkserdeError(
                f"{self.temp}: process {self.rank} does not see the file process 0 created: the checkpoint "
                "directory must be on a file system shared by all processes"
            )
        blocks: list[PreparedBlock] = self.encoded.own_blocks
        offsets, _ = block_offsets(start, [len(b.payload) for b in blocks])
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
        self.file.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0))
        others: dict[int, list] = {}  # array -> index entries of the other processes' blocks, in process order
        for r, m in enumerate(layout.messages[1:], 1):
            for note, offset in zip(map(block_note, m["blocks"]), layout.offsets[r]):
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
        self._raise_first_error(messages, "writing process 0's region")
        f, self.file = self.file, None
        index, end = self.region
        try:
            meta_all = {**self.meta, "process_count": self.size, "types": self.encoded.types}
            f.seek(end)
            merged = merge_per_process(self.encoded.tree, [m["per_process"] for m in self.layout.messages])
            write_header(f, end, merged, index, meta_all)
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
            entry, position = yield from stream_array_steps(f, array, position, checksums.get(i))
            index.append({"dtype": stored_dtype(array), "shape": list(array.shape), "nbytes": array.nbytes, **entry})
            continue
        blocks = []
        for start, block in mine.get(i, ()):
            entry, position = yield from stream_array_steps(f, block, position)
            blocks.append({"start": list(start), "shape": list(block.shape), **entry})
        blocks += others.get(i, [])
        index.append({"dtype": stored_dtype(array), "shape": list(array.shape), "blocks": blocks})
    return index, position
