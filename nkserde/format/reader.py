"""Reader: the ways to read a file (whole, lazily, verifying it, its index
alone, its arrays one at a time), each beginning with the validated index
of nkserde.format.header. Validates everything it reads; any damage is a
CorruptFileError naming the file and what failed, never a raw
msgpack/zstd/struct error."""

from __future__ import annotations

import contextlib
import math
import threading
from pathlib import Path

import numpy as np

from ..errors import CorruptFileError
from ..types.placement import ProcessValues, full_index
from . import codecs, tree_codec
from .array_read import aligned_empty, read_array, read_blocks
from .checksum import streaming_checksum
from .header import check_decoded, check_load_size, open_header, open_index
from .layout import DTYPES
from .read_failures import corrupt, read_errors


def malformed_tree(path, exc: Exception) -> CorruptFileError:
    """The error of a header tree that does not decode (a reference to no
    array, a marker of the wrong shape, nesting too deep)."""
    return corrupt(path, f"header tree is malformed: {exc}")


def _decode_tree(encoded, arrays, path):
    try:
        return tree_codec.decode(encoded, arrays, set())
    except (ValueError, RecursionError) as exc:
        raise malformed_tree(path, exc) from None


def read_header(path) -> dict:
    """The validated header: ``{format_version, meta, tree, arrays}``; the tree
    still holds ``{"@array": i}`` references."""
    path = Path(path)
    with read_errors(path), open(path, "rb") as f:
        return open_header(f, path)[0]  # (the header alone: its index entries are not read)


@contextlib.contextmanager
def _opened(path, buffering: int = -1):
    """``(file, Index)`` of ``path``, open for reading, its OS errors as
    FileReadError."""
    with read_errors(path), open(path, "rb", buffering=buffering) as f:
        yield f, open_index(f, path)


def read_file(path) -> tuple[dict, object]:
    """Reads and verifies a whole file. Returns ``(header, tree)`` where the
    tree holds numpy arrays (64-byte aligned, owned by the caller)."""
    path = Path(path)
    with _opened(path, buffering=0) as (f, index):
        index.check_load(path)  # the whole index is checked, and the load's size, before any array is allocated
        header = index.header
        arrays = [
            read_blocks(f, entry["dtype"], entry["shape"], blocks, i, path)
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
                index = open_index(self._file, self.path)
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
            check_decoded(self._decoded + entry["nbytes"], self.path, f"array {i} would bring this load")
            with read_errors(self.path):
                out = read_array(self._file, entry, i, self.path)
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
        check_load_size(
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
    nkserde.checkpoint.persist.background_write). Raw arrays are checksummed as they stream through
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
                    check_load_size([block], path, f"array {i}: a zstd frame decodes")
                    read_array(f, block, i, path)  # small frames: whole
                    yield
                    continue
                hasher, remaining = streaming_checksum(), block["nbytes"]
                f.seek(block["offset"])
                while remaining:
                    n = f.readinto(buffer[: min(len(buffer), remaining)])
                    if not n:
                        raise corrupt(path, f"array {i}: truncated payload")
                    hasher.update(buffer[:n])
                    remaining -= n
                    yield
                if hasher.intdigest() != block["checksum"]:
                    raise corrupt(
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
                raise corrupt(path, f"array reference {i} out of range")
            entry = entries[i]
            check_load_size([entry], path, f"array {i} decodes")  # one array at a time
            yield i, read_blocks(f, entry["dtype"], entry["shape"], index.blocks[i], i, path)
