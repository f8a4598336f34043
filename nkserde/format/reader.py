"""Reader: validates everything it reads; any damage is a CorruptFileError
naming the file and what failed, never a raw msgpack/zstd/struct error."""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import threading
from pathlib import Path
from typing import NamedTuple

import msgpack
import numpy as np

from ..errors import CorruptFileError, FileReadError, NkserdeError, UnsupportedVersionError
from ..placement import ProcessValues, full_index
from . import codecs, foreign, limits, tree_codec
from .checksum import checksum, streaming_checksum
from .layout import (
    ALIGNMENT,
    DTYPES,
    END_MAGIC,
    FORMAT_VERSION,
    MAGIC,
    PREAMBLE,
    TRAILER,
)

_INDEX_KEYS = {"dtype", "shape", "offset", "nbytes", "stored", "codec", "checksum"}
_BLOCKED_KEYS = {"dtype", "shape", "blocks"}
_BLOCK_KEYS = {"start", "shape", "offset", "stored", "codec", "checksum"}
MAX_BLOCKS = 1 << 16
MAX_GRID_CELLS = 1 << 22  # cells of the grid the blocks of one array are checked on


@contextlib.contextmanager
def read_errors(path):
    """An OSError while reading ``path`` (EIO of a failing disk or network
    file system, a permission) becomes a FileReadError naming the file; a
    missing file stays FileNotFoundError."""
    try:
        yield
    except (FileNotFoundError, NkserdeError):
        raise
    except OSError as exc:
        error = FileReadError(exc.errno, f"{path}: reading the file failed: {exc.strerror or exc}")
        error.filename = str(path)
        raise error from exc


def _corrupt(path, what) -> CorruptFileError:
    return CorruptFileError(f"{path}: {what}")


def malformed_tree(path, exc: Exception) -> CorruptFileError:
    """The error of a header tree that does not decode (a reference to no
    array, a marker of the wrong shape, nesting too deep)."""
    return _corrupt(path, f"header tree is malformed: {exc}")


def _decode_tree(encoded, arrays, path):
    try:
        return tree_codec.decode(encoded, arrays, set())
    except (ValueError, RecursionError) as exc:
        raise malformed_tree(path, exc) from None


def _read_exact(f, n: int, path, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _corrupt(path, f"truncated while reading {what} ({len(data)} of {n} bytes)")
    return data


def _open_header(f, path) -> tuple[dict, int]:
    size = os.fstat(f.fileno()).st_size
    max_header = limits.current().max_header_bytes
    start = f.read(PREAMBLE.size)
    if not start.startswith(MAGIC) and not (start and MAGIC.startswith(start)):
        f.seek(max(0, size - len(END_MAGIC)))
        if size < PREAMBLE.size + TRAILER.size or f.read() != END_MAGIC:
            raise foreign.not_nkserde(path)  # what it is instead, and what nkserde reads
        raise _corrupt(
            path,
            f"bad magic bytes {start[: len(MAGIC)]!r} where an nkserde file starts with {MAGIC!r}, though it "
            "ends as one: the start of the file is damaged; copy it again, or load an older checkpoint",
        )
    if size < PREAMBLE.size + TRAILER.size:
        raise _corrupt(
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
        raise _corrupt(path, f"invalid format version {version}")
    f.seek(size - TRAILER.size)
    offset, length, digest, end = TRAILER.unpack(_read_exact(f, TRAILER.size, path, "trailer"))
    if end != END_MAGIC:
        raise _corrupt(path, "bad trailer magic: the file is truncated or was not completely written")
    if offset + length + TRAILER.size != size or offset < PREAMBLE.size:
        raise _corrupt(path, f"header position {offset}+{length} does not fit a file of {size} bytes")
    if length > max_header:
        raise limits.LoadLimitError(
            f"{path}: header of {length} bytes is larger than the limit of {max_header} bytes "
            "(nkserde.set_load_limits(max_header_bytes=...) or NKSERDE_MAX_HEADER_BYTES raise it)"
        )
    f.seek(offset)
    raw = _read_exact(f, length, path, "header")
    if checksum(raw) != digest:
        raise _corrupt(path, "header checksum mismatch: the header is damaged")
    try:
        header = msgpack.unpackb(raw, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises many types; all mean the same here
        raise _corrupt(path, f"header is not valid msgpack ({type(exc).__name__}: {exc})") from None
    if (
        not isinstance(header, dict)
        or header.get("format_version") != version
        or not isinstance(header.get("meta"), dict)
        or "tree" not in header
        or not isinstance(header.get("arrays"), list)
    ):
        raise _corrupt(path, "header does not have the nkserde layout")
    return header, offset


def read_header(path) -> dict:
    """The validated header: ``{format_version, meta, tree, arrays}``; the tree
    still holds ``{"@array": i}`` references."""
    path = Path(path)
    with read_errors(path), open(path, "rb") as f:
        return _open_header(f, path)[0]  # (the header alone: its index entries are not read)


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
        _check_load_size(self.header["arrays"], path)


def _read_index(f, path) -> Index:
    """The header of the open file ``f`` and every index entry, validated
    before any of their fields is used: the one way every reader begins."""
    header, payload_end = _open_header(f, path)
    version = header["format_version"]
    blocks = [_check_entry(entry, i, payload_end, path, version) for i, entry in enumerate(header["arrays"])]
    return Index(header, blocks)


@contextlib.contextmanager
def _opened(path, buffering: int = -1):
    """``(file, Index)`` of ``path``, open for reading, its OS errors as
    FileReadError."""
    with read_errors(path), open(path, "rb", buffering=buffering) as f:
        yield f, _read_index(f, path)


def _is_index(v) -> bool:
    return isinstance(v, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in v)


def _check_entry(entry, i, payload_end, path, version):
    """Validates an array's index entry; returns its blocks (one block
    covering the whole array for the single-block form)."""
    if version >= 2 and isinstance(entry, dict) and set(entry) == _BLOCKED_KEYS:
        return _check_blocked(entry, i, payload_end, path)
    if not isinstance(entry, dict) or set(entry) != _INDEX_KEYS:
        raise _corrupt(path, f"array {i}: malformed index entry")
    _check_dtype_shape(entry, i, path)
    _check_storage(entry, i, entry["shape"], payload_end, path)
    return [Block([0] * len(entry["shape"]), entry["shape"], entry)]


def _check_dtype_shape(entry, i, path):
    if not isinstance(entry["dtype"], str) or entry["dtype"] not in DTYPES:
        raise _corrupt(path, f"array {i}: unknown dtype {entry['dtype']!r}")
    if not _is_index(entry["shape"]):
        raise _corrupt(path, f"array {i}: malformed shape {entry['shape']!r}")


def _check_blocked(entry, i, payload_end, path):
    """Blocks must lie inside the array, be pairwise disjoint and fill it."""
    _check_dtype_shape(entry, i, path)
    shape, blocks = entry["shape"], entry["blocks"]
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        raise _corrupt(path, f"array {i}: malformed block list")
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
            raise _corrupt(path, f"array {i}: malformed block {block!r:.200}")
        block = {
            **block,
            "dtype": entry["dtype"],
            "nbytes": math.prod(block["shape"]) * DTYPES[entry["dtype"]].itemsize,
        }
        _check_storage(block, i, block["shape"], payload_end, path)
        boxes.append(Block(block["start"], block["shape"], block))
    if sum(math.prod(n) for _, n, _ in boxes) != math.prod(shape):
        raise _corrupt(path, f"array {i}: blocks do not fill shape {shape}")
    _check_disjoint([(s, n) for s, n, _ in boxes if math.prod(n)], i, path)
    return boxes


def _check_disjoint(boxes, i, path):
    """No two blocks overlap. Painted on the grid their edges cut the array
    into, so the cost grows with the cells (bounded), not the pairs."""
    if len(boxes) < 2:
        return
    cuts = [sorted({s[d] for s, _ in boxes} | {s[d] + n[d] for s, n in boxes}) for d in range(len(boxes[0][0]))]
    if math.prod(len(c) - 1 for c in cuts) > MAX_GRID_CELLS:
        raise _corrupt(path, f"array {i}: {len(boxes)} blocks cut the array into too many pieces")
    painted = np.zeros([len(c) - 1 for c in cuts], bool)
    for start, block in boxes:
        index = tuple(
            slice(bisect.bisect_left(c, s), bisect.bisect_left(c, s + n)) for c, s, n in zip(cuts, start, block)
        )
        if painted[index].any():
            raise _corrupt(path, f"array {i}: blocks overlap")
        painted[index] = True


def _check_storage(entry, i, shape, payload_end, path):
    dtype = entry["dtype"]
    ints = [entry[k] for k in ("offset", "nbytes", "stored", "checksum")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
        raise _corrupt(path, f"array {i}: malformed offset/length/checksum")
    if entry["nbytes"] != math.prod(shape) * DTYPES[dtype].itemsize:
        raise _corrupt(path, f"array {i}: {entry['nbytes']} bytes do not match shape {shape} of {dtype}")
    if entry["codec"] not in codecs.CODECS:
        raise _corrupt(path, f"array {i}: unknown codec {entry['codec']!r}")
    if entry["codec"] == codecs.RAW and entry["stored"] != entry["nbytes"]:
        raise _corrupt(path, f"array {i}: raw array with stored length != size")
    if entry["codec"] == codecs.ZSTD and entry["nbytes"] > entry["stored"] * limits.MAX_ZSTD_RATIO:
        raise _corrupt(
            path,
            f"array {i} ({dtype}{list(shape)}): {entry['nbytes']} bytes cannot come "
            f"from a zstd frame of {entry['stored']} bytes",
        )
    if entry["offset"] % ALIGNMENT or entry["offset"] + entry["stored"] > payload_end:
        raise _corrupt(path, f"array {i}: payload position out of bounds")


def aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 buffer whose address is a multiple of ALIGNMENT, so that JAX
    can alias it instead of copying. (Anonymous mmaps instead of numpy's
    allocator made 10-100 MB loads 2-3x slower here: 4 KiB page faults.)"""
    buf = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = (-buf.ctypes.data) % ALIGNMENT
    return buf[start : start + nbytes]


def _read_blocks(f, dtype_name, shape, blocks: list[Block], i, path) -> np.ndarray:
    if len(blocks) == 1 and list(blocks[0].shape) == list(shape):
        return _read_array(f, blocks[0].entry, i, path)
    dtype = DTYPES[dtype_name]
    out = aligned_empty(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)
    for start, block_shape, entry in blocks:
        index = tuple(slice(s, s + n) for s, n in zip(start, block_shape))
        out[index] = _read_array(f, entry, i, path)
    return out


def _read_array(f, entry, i, path) -> np.ndarray:
    dtype, shape, nbytes = DTYPES[entry["dtype"]], tuple(entry["shape"]), entry["nbytes"]
    f.seek(entry["offset"])
    if entry["codec"] == codecs.RAW:
        out = aligned_empty(nbytes)
        view = memoryview(out)
        filled = 0
        while filled < nbytes:
            n = f.readinto(view[filled:])
            if not n:
                raise _corrupt(path, f"array {i}: truncated payload")
            filled += n
        if checksum(out) != entry["checksum"]:
            raise _corrupt(path, f"array {i} ({entry['dtype']}{list(shape)}): payload checksum mismatch")
    else:
        # Verify the stored frame before zstd sees it: a damaged or hostile
        # frame never reaches the decompressor. Compressed frames are small
        # (small arrays, or near-constant large ones), so holding one is cheap.
        frame = _read_exact(f, entry["stored"], path, f"array {i}")
        if checksum(frame) != entry["checksum"]:
            raise _corrupt(path, f"array {i} ({entry['dtype']}{list(shape)}): payload checksum mismatch")
        declared = codecs.content_size(frame)
        if declared is not None and declared != nbytes:
            raise _corrupt(
                path,
                f"array {i} ({entry['dtype']}{list(shape)}): the zstd frame declares "
                f"{declared} bytes, the index {nbytes}",
            )
        out = aligned_empty(nbytes)
        view, filled = memoryview(out), 0
        try:
            reader = codecs.stream_reader(frame)
            while filled < nbytes:
                n = reader.readinto(view[filled:])
                if not n:
                    break
                filled += n
            extra = reader.read(1)
        except codecs.ZstdError as exc:
            raise _corrupt(path, f"array {i}: zstd payload is damaged ({exc})") from None
        if filled != nbytes or extra:
            raise _corrupt(path, f"array {i}: payload does not decompress to {nbytes} bytes")
    return out.view(dtype).reshape(shape)


def _check_load_size(entries, path, what="the arrays of this file decode"):
    """The declared decoded bytes of ``entries`` against ``max_load_bytes``."""
    _check_decoded(sum(math.prod(e["shape"]) * DTYPES[e["dtype"]].itemsize for e in entries), path, what)


def _check_decoded(total: int, path, what: str):
    """``total`` decoded bytes (``what`` brings the load to them) against
    ``max_load_bytes``."""
    limit = limits.current().max_load_bytes
    if total > limit:
        raise limits.LoadLimitError(
            f"{path}: {what} to {total} bytes, more than the limit of {limit} bytes "
            "(nkserde.set_load_limits(max_load_bytes=...) or NKSERDE_MAX_LOAD_BYTES raise it)"
        )


def read_file(path) -> tuple[dict, object]:
    """Reads and verifies a whole file. Returns ``(header, tree)`` where the
    tree holds numpy arrays (64-byte aligned, owned by the caller)."""
    path = Path(path)
    with _opened(path, buffering=0) as (f, index):
        index.check_load(path)  # the whole index is checked, and the load's size, before any array is allocated
        header = index.header
        arrays = [
            _read_blocks(f, entry["dtype"], entry["shape"], blocks, i, path)
            for i, (entry, blocks) in enumerate(zip(header["arrays"], index.blocks))
        ]
    return header, _decode_tree(header["tree"], arrays, path)


class LazyFile:
    """An open file whose arrays are read on demand (see :class:`LazyArray`):
    the header is read and every index entry validated when it opens, a
    payload only when an array is asked for, each block checked against
    its checksum as it is read. Close it (or use ``with``) when done."""

    def __init__(self, path):
        self.path = Path(path)
        with read_errors(self.path):
            self._file = open(self.path, "rb", buffering=0)
        self._lock = threading.Lock()
        self._decoded = 0  # bytes of arrays read so far, against max_load_bytes
        try:
            with read_errors(self.path):
                index = _read_index(self._file, self.path)
            self.header = index.header
            self.arrays = [
                LazyArray(self, i, entry["dtype"], tuple(entry["shape"]), blocks)
                for i, (entry, blocks) in enumerate(zip(self.header["arrays"], index.blocks))
            ]
            self.tree = _decode_tree(self.header["tree"], self.arrays, self.path)
        except BaseException:
            self._file.close()
            raise

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def read_block(self, entry, i) -> np.ndarray:
        if self._file.closed:
            raise ValueError(f"{self.path}: the file was closed; array {i} was not read")
        with self._lock:
            _check_decoded(self._decoded + entry["nbytes"], self.path, f"array {i} would bring this load")
            with read_errors(self.path):
                out = _read_array(self._file, entry, i, self.path)
            self._decoded += entry["nbytes"]
            return out


def _overlap(a_start, a_shape, b_start, b_shape):
    """The intersection of two boxes as (start, stop) per axis, or None."""
    lo = [max(a, b) for a, b in zip(a_start, b_start)]
    hi = [min(a + n, b + m) for a, n, b, m in zip(a_start, a_shape, b_start, b_shape)]
    if any(h <= low for low, h in zip(lo, hi)):
        return None
    return lo, hi


class LazyArray:
    """An array of an open :class:`LazyFile`, not read yet. ``read()`` reads
    and verifies it (``read(index)``: only the blocks overlapping ``index``,
    a tuple of slices, as a multi-process load does for its shards);
    ``row[r]`` is row ``r`` of a stacked per-process array. ``memmap()``
    maps a raw single-block array without reading (nor verifying) it."""

    def __init__(self, source: LazyFile, i: int, dtype: str, shape: tuple, blocks, row=None):
        self._source, self._i, self._blocks, self._row = source, i, blocks, row
        self.dtype_name = dtype
        self.dtype = DTYPES[dtype]
        self._base_shape = tuple(shape)
        self.shape = self._base_shape if row is None else self._base_shape[1:]
        self._cache: dict[int, np.ndarray] = {}

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: math.prod(self.shape))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __repr__(self):
        return f"LazyArray({self.dtype_name}{list(self.shape)})"

    def __getitem__(self, row: int) -> LazyArray:
        if self._row is not None or not isinstance(row, int) or not 0 <= row < self._base_shape[0]:
            raise IndexError(f"row {row!r} of {self!r}")
        return LazyArray(self._source, self._i, self.dtype_name, self._base_shape, self._blocks, row)

    def _block(self, j) -> np.ndarray:
        # a block overlapping several shards is read once per load
        if j not in self._cache:
            self._cache[j] = self._source.read_block(self._blocks[j].entry, self._i)
        return self._cache[j]

    def read(self, index=None) -> np.ndarray:
        full = index is None
        index = full_index(index, self.shape)
        if self._row is not None:
            index = (slice(self._row, self._row + 1),) + index
        start = [s.start for s in index]
        shape = [s.stop - s.start for s in index]
        blocks = self._blocks
        if full and self._row is None and len(blocks) == 1 and list(blocks[0].shape) == list(self._base_shape):
            return self._source.read_block(blocks[0].entry, self._i)  # the common case: no copy
        _check_load_size(
            [{"dtype": self.dtype_name, "shape": shape}], self._source.path, f"array {self._i}: the part read decodes"
        )  # allocated before its blocks are read
        out = aligned_empty(math.prod(shape) * self.dtype.itemsize).view(self.dtype).reshape(shape)
        for j, (b_start, b_shape, _entry) in enumerate(blocks):
            box = _overlap(start, shape, b_start, b_shape)
            if box is None or not math.prod(shape):
                continue
            lo, hi = box
            src = tuple(slice(a - b, c - b) for a, c, b in zip(lo, hi, b_start))
            dst = tuple(slice(a - b, c - b) for a, c, b in zip(lo, hi, start))
            out[dst] = self._block(j)[src]
        return out[0] if self._row is not None else out

    def memmap(self) -> np.ndarray:
        """A read-only memory map of the stored bytes if they are raw and one
        block (unverified: :meth:`read` checks the checksum), else :meth:`read`."""
        blocks = self._blocks
        if (
            self._row is None
            and len(blocks) == 1
            and blocks[0].entry["codec"] == codecs.RAW
            and list(blocks[0].shape) == list(self._base_shape)
            and self.size
        ):
            return np.memmap(
                self._source.path, dtype=self.dtype, mode="r", offset=blocks[0].entry["offset"], shape=self.shape
            )
        return self.read()


def materialize(tree):
    """``tree`` with every :class:`LazyArray` read."""
    if isinstance(tree, LazyArray):
        return tree.read()
    if isinstance(tree, dict):
        return {k: materialize(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [materialize(v) for v in tree]
    if isinstance(tree, ProcessValues):
        return ProcessValues([materialize(v) for v in tree.values])
    return tree


def verify_steps(path):
    """Checks every checksum and the structure of a file, as
    :func:`read_file` does, as a generator yielding after every
    ``codecs.CHUNK`` bytes read (any thread may advance it; see
    nkserde.checkpoint.background). Raw arrays are checksummed as they stream through
    one buffer; nothing is kept. A file whose arrays a load would refuse
    (``max_load_bytes``) does not verify either: what verifies is what
    loads. Returns the header."""
    path = Path(path)
    buffer = memoryview(bytearray(codecs.CHUNK))
    with _opened(path, buffering=0) as (f, index):
        index.check_load(path)
        header = index.header
        for i, blocks in enumerate(index.blocks):
            for block in (b.entry for b in blocks):
                if block["codec"] != codecs.RAW:
                    _check_load_size([block], path, f"array {i}: a zstd frame decodes")
                    _read_array(f, block, i, path)  # small frames: whole
                    yield
                    continue
                hasher, remaining = streaming_checksum(), block["nbytes"]
                f.seek(block["offset"])
                while remaining:
                    n = f.readinto(buffer[: min(len(buffer), remaining)])
                    if not n:
                        raise _corrupt(path, f"array {i}: truncated payload")
                    hasher.update(buffer[:n])
                    remaining -= n
                    yield
                if hasher.intdigest() != block["checksum"]:
                    raise _corrupt(
                        path, f"array {i} ({block['dtype']}{list(block['shape'])}): payload checksum mismatch"
                    )
    # the tree's references, against placeholders of the arrays' shapes
    shapes = [np.broadcast_to(np.zeros((), np.uint8), tuple(e["shape"])) for e in header["arrays"]]
    _decode_tree(header["tree"], shapes, path)
    return header


def read_index(path) -> tuple[dict, list]:
    """The validated header and array table, without reading any array:
    ``(header, arrays)`` where ``arrays[i]`` is ``{"dtype", "shape",
    "nbytes", "stored", "codecs", "blocks"}`` (``stored``: bytes on disk,
    summed over blocks; ``codecs``: the distinct codecs of its blocks;
    ``blocks``: how many blocks, 1 unless several processes wrote it).
    Costs the trailer and the header: a multi-GB file is read instantly."""
    path = Path(path)
    with _opened(path) as (_, index):
        header = index.header
    table = []
    for entry, blocks in zip(header["arrays"], index.blocks):
        table.append(
            {
                "dtype": entry["dtype"],
                "shape": list(entry["shape"]),
                "nbytes": math.prod(entry["shape"]) * DTYPES[entry["dtype"]].itemsize,
                "stored": sum(b.entry["stored"] for b in blocks),
                "codecs": sorted({b.entry["codec"] for b in blocks}),
                "blocks": len(blocks),
            }
        )
    return header, table


def read_arrays(path, indices=None):
    """Yields ``(i, array)`` for the arrays ``indices`` (all by default) of
    a file, one at a time, each verified against its checksum: memory holds
    one array, not the file."""
    path = Path(path)
    with _opened(path, buffering=0) as (f, index):
        entries = index.header["arrays"]
        for i in range(len(entries)) if indices is None else indices:
            if not 0 <= i < len(entries):
                raise _corrupt(path, f"array reference {i} out of range")
            entry = entries[i]
            _check_load_size([entry], path, f"array {i} decodes")  # one array at a time
            yield i, _read_blocks(f, entry["dtype"], entry["shape"], index.blocks[i], i, path)
