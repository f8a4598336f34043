"""Constants and fixed-size records of the nkserde file layout."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np

MAGIC = b"\x89NKSERD\n"  # 8 bytes; the high first byte keeps it from reading as text
END_MAGIC = b"NKSERDE\x00"
FORMAT_VERSION = 2  # 2: arrays stored as blocks written by several processes
ALIGNMENT = 64  # byte alignment of every array: lets loads alias buffers into JAX

PREAMBLE = struct.Struct("<8sII")  # magic, format version, flags
TRAILER = struct.Struct("<QQQ8s")  # header offset, header length, header checksum, end magic
PAYLOAD_START = 64

# dtype names that may appear in a file, and the numpy dtype each one means.
# Looked up by name, never evaluated: a file cannot name an arbitrary type.
DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}
for _name in (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3b11fnuz",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "int4",
    "uint4",
):
    if hasattr(ml_dtypes, _name):
        DTYPES[_name] = np.dtype(getattr(ml_dtypes, _name))


def dtype_name(dtype: np.dtype) -> str | None:
    """The file name of ``dtype``, or None if it cannot be stored."""
    name = np.dtype(dtype).name
    return name if name in DTYPES else None


def aligned_offset(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT
