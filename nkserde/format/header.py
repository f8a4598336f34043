"""The end of a file: the header (``{format_version, meta, tree, arrays}``,
msgpack) and the trailer that finds it. A writer ends a file with
:func:`write_header`; a reader begins with :func:`open_index`, which
validates the header and every array's index entry before any of their
fields is used: any damage is a CorruptFileError naming the file and what
failed, never a raw msgpack/struct error."""

from __future__ import annotations

import bisect
import math
import os
from typing import NamedTuple

import msgpack
import numpy as np

from ..errors import UnsupportedVersionError
from . import codecs, foreign, limits
from .checksum import checksum
from .layout import (
    ALIGNMENT,
    DTYPES,
    END_MAGIC,
    FORMAT_VERSION,
    MAGIC,
    PREAMBLE,
    TRAILER,
)
from .read_failures import MSGPACK_ERRORS, corrupt, read_exact

_INDEX_KEYS = {"dtype", "shape", "offset", "nbytes", "stored", "codec", "checksum"}
_BLOCKED_KEYS = {"dtype", "shape", "blocks"}
_BLOCK_KEYS = {"start", "shape", "offset", "stored", "codec", "checksum"}
MAX_BLOCKS = 1 << 16
MAX_GRID_CELLS = 1 << 22  # cells of the grid the blocks of one array are checked on


def write_header(f, position: int, encoded, index, meta) -> None:
    """Ends the file ``f``, whose payload ends at ``position``: the header of
    the tree ``encoded``, the array ``index`` and ``meta``, then the trailer."""
    header = msgpack.packb(
        {"format_version": FORMAT_VERSION, "meta": meta, "tree": encoded, "arrays": index},
        use_bin_type=True,
    )
    f.write(header)
    f.write(TRAILER.pack(position, len(header), checksum(header), END_MAGIC))


def open_header(f, path) -> tuple[dict, int]:
    """The validated header of the open file ``f`` and where its payload
    ends (the header's offset)."""
    size = os.fstat(f.fileno()).st_size
    max_header = limits.current().max_header_bytes
    start = f.read(PREAMBLE.size)
    if not start.startswith(MAGIC) and not (start and MAGIC.startswith(start)):
        f.seek(max(0, size - len(END_MAGIC)))
        if size < PREAMBLE.size + TRAILER.size or f.read() != END_MAGIC:
            raise foreign.not_nkserde(path)  # what it is instead, and what nkserde reads
        raise corrupt(
            path,
            f"bad magic bytes {start[: len(MAGIC)]!r} where an nkserde file starts with {MAGIC!r}, though it "
            "ends as one: the start of the file is damaged; copy it again, or load an older checkpoint",
        )
    if size < PREAMBLE.size + TRAILER.size:
        raise corrupt(
            path,
            f"truncated: {size} bytes, the start of an nkserde file, which has at least "
            f"{PREAMBLE.size + TRAILER.size} (a save never leaves one: a copy cut short?); copy it again, "
            "or load an older checkpoint",
        )
    magic, version, _flags = PREAMBLE.unpack(start)
    if version > FORMAT_VERSION:
        raise UnsupportedVersionError(
            f"{path}: file format version {version} is newer than this nkserde "
            f"supports (format version {FORMAT_VERSION}); upgrade nkserde"
        )
    if version < 1:
        raise corrupt(path, f"invalid format version {version}")
    f.seek(size - TRAILER.size)
    offset, length, digest, end = TRAILER.unpack(read_exact(f, TRAILER.size, path, "trailer"))
    if end != END_MAGIC:
        raise corrupt(path, "bad trailer magic: the file is truncated or was not completely written")
    if offset + length + TRAILER.size != size or offset < PREAMBLE.size:
        raise corrupt(path, f"header position {offset}+{length} does not fit a file of {size} bytes")
    if length > max_header:
        raise limits.LoadLimitError(
            f"{path}: header of {length} bytes is larger than the limit of {max_header} bytes "
            "(nkserde.set_load_limits(max_header_bytes=...) or NKSERDE_MAX_HEADER_BYTES raise it)"
        )
    f.seek(offset)
    raw = read_exact(f, length, path, "header")
    if checksum(raw) != digest:
        raise corrupt(path, "header checksum mismatch: the header is damaged")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True, use_list=True)
    except MSGPACK_ERRORS as exc:
        raise corrupt(path, f"header is not valid msgpack ({type(exc).__name__}: {exc})") from None
    if (
        not isinstance(header, dict)
        or header.get("format_version") != version
        or not isinstance(header.get("meta"), dict)
        or "tree" not in header
        or not isinstance(header.get("arrays"), list)
    ):
        raise corrupt(path, "header does not have the nkserde layout")
    return header, offset


class Block(NamedTuple):
    """A block of an array: where it starts, its shape, its storage entry
    (dtype, offset, stored bytes, codec, checksum). One block covers a whole
    array unless several processes wrote it."""

    start: list
    shape: list
    entry: dict


class Index(NamedTuple):
    """A file's validated header and, per array, its validated blocks."""

    header: dict
    blocks: list[list[Block]]

    def check_load(self, path) -> None:
        """The file's arrays, decoded, against ``max_load_bytes``: a load
        (and a verification, which must agree with it) is refused before
        any array is allocated."""
        check_load_size(self.header["arrays"], path)


def open_index(f, path) -> Index:
    """The header of the open file ``f`` and every index entry, validated
    before any of their fields is used: the one way every reader begins."""
    header, payload_end = open_header(f, path)
    version = header["format_version"]
    blocks = [_check_entry(entry, i, payload_end, path, version) for i, entry in enumerate(header["arrays"])]
    return Index(header, blocks)


def _is_index(v) -> bool:
    return isinstance(v, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in v)


def _check_entry(entry, i, payload_end, path, version):
    """Validates an array's index entry; returns its blocks (one block
    covering the whole array for the single-block form)."""
    if version >= 2 and isinstance(entry, dict) and set(entry) == _BLOCKED_KEYS:
        return _check_blocked(entry, i, payload_end, path)
    if not isinstance(entry, dict) or set(entry) != _INDEX_KEYS:
        raise corrupt(path, f"array {i}: malformed index entry")
    _check_dtype_shape(entry, i, path)
    _check_storage(entry, i, entry["shape"], payload_end, path)
    return [Block([0] * len(entry["shape"]), entry["shape"], entry)]


def _check_dtype_shape(entry, i, path):
    if not isinstance(entry["dtype"], str) or entry["dtype"] not in DTYPES:
        raise corrupt(path, f"array {i}: unknown dtype {entry['dtype']!r}")
    if not _is_index(entry["shape"]):
        raise corrupt(path, f"array {i}: malformed shape {entry['shape']!r}")


def _check_blocked(entry, i, payload_end, path):
    """Blocks must lie inside the array, be pairwise disjoint and fill it."""
    _check_dtype_shape(entry, i, path)
    shape, blocks = entry["shape"], entry["blocks"]
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        raise corrupt(path, f"array {i}: malformed block list")
    boxes = []
    for block in blocks:
        if (
            not isinstance(block, dict)
            or set(block) != _BLOCK_KEYS
            or not _is_index(block["start"])
            or not _is_index(block["shape"])
            or len(block["start"]) != len(shape)
            or len(block["shape"]) != len(shape)
            or any(s + n > d for s, n, d in zip(block["start"], block["shape"], shape))
        ):
            raise corrupt(path, f"array {i}: malformed block {block!r:.200}")
        block = {
            **block,
            "dtype": entry["dtype"],
            "nbytes": math.prod(block["shape"]) * DTYPES[entry["dtype"]].itemsize,
        }
        _check_storage(block, i, block["shape"], payload_end, path)
        boxes.append(Block(block["start"], block["shape"], block))
    if sum(math.prod(n) for _, n, _ in boxes) != math.prod(shape):
        raise corrupt(path, f"array {i}: blocks do not fill shape {shape}")
    _check_disjoint([(s, n) for s, n, _ in boxes if math.prod(n)], i, path)
    return boxes


def _check_disjoint(boxes, i, path):
    """No two blocks overlap. Painted on the grid their edges cut the array
    into, so the cost grows with the cells (bounded), not the pairs."""
    if len(boxes) < 2:
        return
    cuts = [sorted({s[d] for s, _ in boxes} | {s[d] + n[d] for s, n in boxes}) for d in range(len(boxes[0][0]))]
    if math.prod(len(c) - 1 for c in cuts) > MAX_GRID_CELLS:
        raise corrupt(path, f"array {i}: {len(boxes)} blocks cut the array into too many pieces")
    painted = np.zeros([len(c) - 1 for c in cuts], bool)
    for start, block in boxes:
        index = tuple(
            slice(bisect.bisect_left(c, s), bisect.bisect_left(c, s + n)) for c, s, n in zip(cuts, start, block)
        )
        if painted[index].any():
            raise corrupt(path, f"array {i}: blocks overlap")
        painted[index] = True


def _check_storage(entry, i, shape, payload_end, path):
    dtype = entry["dtype"]
    ints = [entry[k] for k in ("offset", "nbytes", "stored", "checksum")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
        raise corrupt(path, f"array {i}: malformed offset/length/checksum")
    if entry["nbytes"] != math.prod(shape) * DTYPES[dtype].itemsize:
        raise corrupt(path, f"array {i}: {entry['nbytes']} bytes do not match shape {shape} of {dtype}")
    if entry["codec"] not in codecs.CODECS:
        raise corrupt(path, f"array {i}: unknown codec {entry['codec']!r}")
    if entry["codec"] == codecs.RAW and entry["stored"] != entry["nbytes"]:
        raise corrupt(path, f"array {i}: raw array with stored length != size")
    if entry["codec"] == codecs.ZSTD and entry["nbytes"] > entry["stored"] * limits.MAX_ZSTD_RATIO:
        raise corrupt(
            path,
            f"array {i} ({dtype}{list(shape)}): {entry['nbytes']} bytes cannot come "
            f"from a zstd frame of {entry['stored']} bytes",
        )
    if entry["offset"] % ALIGNMENT or entry["offset"] + entry["stored"] > payload_end:
        raise corrupt(path, f"array {i}: payload position out of bounds")


def check_load_size(entries, path, what="the arrays of this file decode"):
    """The declared decoded bytes of ``entries`` against ``max_load_bytes``."""
    check_decoded(sum(math.prod(e["shape"]) * DTYPES[e["dtype"]].itemsize for e in entries), path, what)


def check_decoded(total: int, path, what: str):
    """``total`` decoded bytes (``what`` brings the load to them) against
    ``max_load_bytes``."""
    limit = limits.current().max_load_bytes
    if total > limit:
        raise limits.LoadLimitError(
            f"{path}: {what} to {total} bytes, more than the limit of {limit} bytes "
            "(nkserde.set_load_limits(max_load_bytes=...) or NKSERDE_MAX_LOAD_BYTES raise it)"
        )
