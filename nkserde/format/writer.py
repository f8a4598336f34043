"""Streaming writer: one pass over the arrays, no in-memory copy of the state."""

from __future__ import annotations

import sys
from pathlib import Path

import msgpack
import numpy as np

from . import codecs, tree_codec
from .atomic import atomic_write
from .checksum import checksum, streaming_checksum
from .layout import (
    END_MAGIC, FORMAT_VERSION, MAGIC, PAYLOAD_START, PREAMBLE, TRAILER,
    aligned_offset, dtype_name,
)

_ZEROS = bytes(PAYLOAD_START)


def _little_endian(array: np.ndarray) -> np.ndarray:
    bo = array.dtype.byteorder
    if bo == ">" or (bo == "=" and sys.byteorder == "big"):
        array = array.astype(array.dtype.newbyteorder("<"))
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    return array if array.flags.c_contiguous else array.copy(order="C")


def write_file(path, tree, meta: dict) -> Path:
    """Writes ``tree`` (a plain tree, see the package doc) and ``meta`` (a
    msgpack-safe dict) to ``path`` atomically. Returns the path.

    Extra memory: at most one non-contiguous array's copy and one compression
    chunk at a time; contiguous numpy arrays are written from their buffers.
    """
    path = Path(path)
    arrays: list[np.ndarray] = []
    encoded = tree_codec.encode(tree, arrays)
    index = []
    with atomic_write(path) as f:
        f.write(PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0))
        position = PREAMBLE.size
        for array in arrays:
            name = dtype_name(array.dtype)
            if name is None:
                raise TypeError(f"cannot store arrays of dtype {array.dtype}")
            start = aligned_offset(position)
            f.write(_ZEROS[: start - position])
            array = _little_endian(array)
            data = memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")
            codec, frame = codecs.choose_codec(data)
            if codec == codecs.RAW:
                digest = checksum(data)
                f.write(data)
                stored = data.nbytes
            elif frame is not None:
                digest = checksum(frame)
                f.write(frame)
                stored = len(frame)
            else:
                hasher = streaming_checksum()
                stored = codecs.compress_stream(data, f.write, hasher)
                digest = hasher.intdigest()
            index.append({
                "dtype": name, "shape": list(array.shape), "offset": start,
                "nbytes": data.nbytes, "stored": stored, "codec": codec,
                "checksum": digest,
            })
            position = start + stored
        header = msgpack.packb(
            {"format_version": FORMAT_VERSION, "meta": meta, "tree": encoded, "arrays": index},
            use_bin_type=True,
        )
        f.write(header)
        f.write(TRAILER.pack(position, len(header), checksum(header), END_MAGIC))
    return path
