"""Constants and fixed-size records of the nkserde file layout, and what a
file can hold: its dtypes (:data:`DTYPES`, :func:`check_dtype`) and its
text (:func:`check_text`)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Mapping

import numpy as np

from ..errors import UnregisteredTypeError, format_path

MAGIC = b"\x89NKSERD\n"  # 8 bytes; the high first byte keeps it from reading as text
END_MAGIC = b"NKSERDE\x00"
FORMAT_VERSION = 2  # 2: arrays stored as blocks written by several processes
ALIGNMENT = 64  # byte alignment of every array: lets loads alias buffers into JAX
# In a save by several processes, those that write at once (all but
# process 0) each start their blocks on a page of their own: the client
# cache of a shared file system may write back whole pages, and a page two
# nodes wrote into at once would keep one node's bytes only
PAGE = 4096

PREAMBLE = struct.Struct("<8sII")  # magic, format version, flags
TRAILER = struct.Struct("<QQQ8s")  # header offset, header length, header checksum, end magic
PAYLOAD_START = 64

# dtype names that may appear in a file, and the numpy dtype each one means.
# Looked up by name, never evaluated: a file cannot name an arbitrary type.
_NUMPY_DTYPES = (
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
# JAX's extra dtypes, defined by ml_dtypes (a dependency of JAX). Importing
# ml_dtypes costs a second of CPU, more than the rest of a header reader's
# start-up: it is imported when one of these names is looked up (a file
# holding such an array, an array of one being saved), not by the command
# line's header readers otherwise.
_ML_DTYPES = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3b11fnuz",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "int4",
    "uint4",
)


class _Dtypes(Mapping):
    """``{name: np.dtype}`` of the dtypes a file may hold: numpy's at once,
    ml_dtypes' (those the installed ml_dtypes has) on the first look-up of
    one of their names, or on iteration."""

    def __init__(self):
        self._known = {name: np.dtype(name) for name in _NUMPY_DTYPES}
        self._ml_loaded = False

    def _load_ml_dtypes(self) -> None:
        if not self._ml_loaded:
            import ml_dtypes

            for name in _ML_DTYPES:
                if hasattr(ml_dtypes, name):
                    self._known[name] = np.dtype(getattr(ml_dtypes, name))
            self._ml_loaded = True

    def __getitem__(self, name: str) -> np.dtype:
        if name not in self._known and name in _ML_DTYPES:
            self._load_ml_dtypes()
        return self._known[name]

    def __contains__(self, name) -> bool:
        try:
            self[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name read from a file
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        self._load_ml_dtypes()
        return iter(self._known)

    def __len__(self) -> int:
        self._load_ml_dtypes()
        return len(self._known)


DTYPES: Mapping[str, np.dtype] = _Dtypes()


@functools.lru_cache(maxsize=64)
def dtype_name(dtype: np.dtype) -> str | None:
    """The file name of ``dtype``, or None if it cannot be stored. Cached:
    numpy's ``dtype.name`` takes microseconds, and a save asks it twice per
    array (a model of hundreds of small arrays, milliseconds a save)."""
    name = np.dtype(dtype).name
    return name if name in DTYPES else None


def check_dtype(dtype, path) -> str:
    """The file name of ``dtype``; raises UnregisteredTypeError naming
    ``path`` if a file cannot hold arrays of it (the one check of a dtype,
    taking a snapshot and encoding a tree alike)."""
    name = dtype_name(dtype)
    if name is None:
        what = "Python objects" if np.dtype(dtype).hasobject else f"dtype {dtype}"
        raise UnregisteredTypeError(
            f"{format_path(path)}: arrays of {what} cannot be stored (storable dtypes: "
            f"{', '.join(DTYPES)}; convert strings to bytes or a list of str, dates to int64)"
        )
    return name


def check_text(value, path, what: str) -> None:
    """The header holds UTF-8 text: a key must be a str, and no text may hold
    a lone surrogate (the one check of text, saving a state dict and
    encoding a header alike)."""
    if not isinstance(value, str):
        raise UnregisteredTypeError(f"{format_path(path)}: {what} {value!r} is not a str")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UnregisteredTypeError(
            f"{format_path(path)}: {what} {value!r:.80} is not valid Unicode text (a lone surrogate); store it as bytes"
        ) from None


def aligned_offset(offset: int, alignment: int = ALIGNMENT) -> int:
    return -(-offset // alignment) * alignment
