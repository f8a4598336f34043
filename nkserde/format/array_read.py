"""One array out of a file: its stored bytes read, checked against their
checksum and decoded (raw, or one zstd frame verified before zstd sees it)
into a 64-byte aligned buffer; an array of several blocks assembled."""

from __future__ import annotations

import math

import numpy as np

from . import codecs
from .checksum import checksum
from .header import Block
from .layout import ALIGNMENT, DTYPES
from .read_failures import corrupt, read_exact


def aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 buffer whose address is a multiple of ALIGNMENT, so that JAX
    can alias it instead of copying. (Anonymous mmaps instead of numpy's
    allocator made 10-100 MB loads 2-3x slower here: 4 KiB page faults.)"""
    buf = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = (-buf.ctypes.data) % ALIGNMENT
    return buf[start : start + nbytes]


def read_blocks(f, dtype_name, shape, blocks: list[Block], i, path) -> np.ndarray:
    if len(blocks) == 1 and list(blocks[0].shape) == list(shape):
        return read_array(f, blocks[0].entry, i, path)
    dtype = DTYPES[dtype_name]
    out = aligned_empty(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)
    for start, block_shape, entry in blocks:
        index = tuple(slice(s, s + n) for s, n in zip(start, block_shape))
        out[index] = read_array(f, entry, i, path)
    return out


def read_array(f, entry, i, path) -> np.ndarray:
    dtype, shape, nbytes = DTYPES[entry["dtype"]], tuple(entry["shape"]), entry["nbytes"]
    f.seek(entry["offset"])
    if entry["codec"] == codecs.RAW:
        out = aligned_empty(nbytes)
        view = memoryview(out)
        filled = 0
        while filled < nbytes:
            n = f.readinto(view[filled:])
            if not n:
                raise corrupt(path, f"array {i}: truncated payload")
            filled += n
        if checksum(out) != entry["checksum"]:
            raise corrupt(path, f"array {i} ({entry['dtype']}{list(shape)}): payload checksum mismatch")
    else:
        # Verify the stored frame before zstd sees it: a damaged or hostile
        # frame never reaches the decompressor. Compressed frames are small
        # (small arrays, or near-constant large ones), so holding one is cheap.
        frame = read_exact(f, entry["stored"], path, f"array {i}")
        if checksum(frame) != entry["checksum"]:
            raise corrupt(path, f"array {i} ({entry['dtype']}{list(shape)}): payload checksum mismatch")
        declared = codecs.content_size(frame)
        if declared is not None and declared != nbytes:
            raise corrupt(
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
            raise corrupt(path, f"array {i}: zstd payload is damaged ({exc})") from None
        if filled != nbytes or extra:
            raise corrupt(path, f"array {i}: payload does not decompress to {nbytes} bytes")
    return out.view(dtype).reshape(shape)
