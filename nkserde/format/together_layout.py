"""The plan of a multi-process save (nkserde.format.together): what one
process brings to round 1 (:func:`encode_part`: its tree encoded, its
arrays described, its blocks, process 0's streamed and the others'
encoded in memory), and where process 0 places every process's blocks
(:func:`lay_out`, :func:`block_offsets`). The records each phase makes
are passed to the next."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..errors import ProcessMismatchError, format_path
from ..types.placement import GlobalArray
from . import tree_codec
from .array_write import bytes_of, prepare_block, stored_dtype
from .checksum import checksum
from .layout import ALIGNMENT, PAGE, PREAMBLE, aligned_offset
from .together_agreement import ArrayInfo, agreed_part


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


class Encoded(NamedTuple):
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
    types: dict  # the stored objects' types and versions (process 0's go into the metadata)


class Layout(NamedTuple):
    """Process 0's plan after the first round: every process's message, the
    offsets of the other processes' blocks (by rank), where its own region
    starts."""

    messages: list
    offsets: list
    region0: int


def block_note(raw: list) -> BlockNote:
    """A :class:`BlockNote` from a round-1 message (process 0's own list it
    made, or one another process sent: its fields checked by their use)."""
    return BlockNote(*raw)


def encode_part(part, rank: int, size: int) -> Encoded:
    """This process's ``part`` of the state, encoded (process ``rank`` of
    ``size``): the header tree, its arrays, what must agree, its blocks."""
    arrays, paths, deferred, types = [], [], [], {}
    tree = tree_codec.encode(part, arrays, paths, rank=rank, n_processes=size, deferred=deferred, types=types)
    common = len(arrays)  # arrays every process has; then process 0's records
    tree_codec.encode_deferred(deferred, arrays, paths, types)
    described, own_blocks, replicated = [], [], {}
    for i, (array, where) in enumerate(zip(arrays[:common], paths)):
        if isinstance(array, GlobalArray):
            for start, block in array.blocks:
                start = tuple(int(s) for s in start)
                if rank == 0:  # streamed later, like a one-process save
                    own_blocks.append(OwnBlock(i, start, block))
                else:
                    own_blocks.append(PreparedBlock(i, start, list(block.shape), *prepare_block(bytes_of(block))))
            described.append(ArrayInfo(stored_dtype(array, where), list(array.shape), None))
        else:  # replicated: written by 0, checked everywhere
            digest = checksum(bytes_of(array))
            described.append(ArrayInfo(stored_dtype(array, where), list(array.shape), digest))
            replicated[i] = digest
    nbytes = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in arrays)
    agreed = agreed_part(tree, described)
    return Encoded(tree, arrays, paths, common, described, agreed, nbytes, own_blocks, replicated, types)


def lay_out(path, encoded: Encoded, messages: list[dict]) -> tuple[Layout, list[int]]:
    """Process 0, once every process's digest agrees with its own: the
    blocks of round 1's ``messages`` checked to fill each spread array, and
    laid out (the others' blocks first, in process order, then process 0's
    region). Returns the layout and where each process's blocks start."""
    volume: dict[int, int] = {}
    for m in messages:
        for note in map(block_note, m["blocks"]):
            i = note.array
            if not (0 <= i < encoded.common and encoded.described[i].checksum is None):
                raise ProcessMismatchError(f"{path}: a process sent a block of array {i}, not a spread array")
            volume[i] = volume.get(i, 0) + int(np.prod(note.shape))
    for i, a in enumerate(encoded.described):
        if a.checksum is None and volume.get(i, 0) != int(np.prod(a.shape)):
            raise ProcessMismatchError(
                f"{path}: {format_path(encoded.paths[i])}: the processes' blocks hold "
                f"{volume.get(i, 0)} elements of an array of shape {a.shape}"
            )
    # others' blocks first, in process order, then process 0's region. The
    # other processes write at once, each from a page of its own (layout.PAGE:
    # what a shared file system's client cache may write back whole);
    # process 0 writes after they have, into what they wrote
    position = PREAMBLE.size
    starts, offsets = [0], [None]
    for rank, m in enumerate(messages[1:], 1):
        position = aligned_offset(position, PAGE if rank > 1 else ALIGNMENT)
        starts.append(position)
        placed, position = block_offsets(position, [block_note(b).stored for b in m["blocks"]])
        offsets.append(placed)
    return Layout(messages, offsets, aligned_offset(position)), starts


def block_offsets(start: int, stored_sizes) -> tuple[list[int], int]:
    """Aligned offsets of blocks of ``stored_sizes`` laid out from ``start``;
    and the end. Process 0 and the block's owner compute the same."""
    offsets = []
    for stored in stored_sizes:
        start = aligned_offset(start)
        offsets.append(start)
        start += stored
    return offsets, start
