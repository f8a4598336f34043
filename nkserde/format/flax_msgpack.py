"""flax's msgpack encoding (``flax.serialization.msgpack_serialize``, what
``to_bytes`` writes and NetKet's ``.mpack`` and nqxpack state members
hold), decoded within limits.

The encoding: msgpack maps and arrays; arrays are ext type 1 holding a
msgpack ``[shape, dtype name, bytes]``, numpy scalars ext type 3 (the
same), complex numbers ext type 2 (``[real, imag]``); arrays larger than
msgpack's 2 GiB leaf are split into ``{"__msgpack_chunked_array__": True,
"shape": {...}, "chunks": {...}}``.

:func:`restore` is flax's ``msgpack_restore`` with a reader's guarantees:
text map keys only, dtypes only from nkserde's list (never ``object``), every shape checked
against its bytes, at most ``MAX_ITEMS`` containers and entries, nesting at
most ``MAX_DEPTH`` deep, and a chunked array only if its chunks add up to
its shape. The decoded arrays are views of the bytes given (nothing is
allocated beyond what the input holds, but for Python's objects of the
structure). Errors are CorruptFileError / LoadLimitError naming ``where``.
"""

from __future__ import annotations

import math

import msgpack
import numpy as np

from ..errors import CorruptFileError, LoadLimitError
from .layout import DTYPES
from .read_failures import MSGPACK_ERRORS
from .tree_codec import MAX_DEPTH

# A NetKet state dict has tens to thousands of entries; past a million the
# Python objects alone would take hundreds of MB.
MAX_ITEMS = 1 << 20
_NDARRAY, _COMPLEX, _SCALAR = 1, 2, 3
_CHUNKED = "__msgpack_chunked_array__"


class _Counter:
    def __init__(self, where: str):
        self.where, self.items = where, 0

    def add(self, n: int) -> None:
        self.items += n
        if self.items > MAX_ITEMS:
            raise LoadLimitError(f"{self.where}: more than {MAX_ITEMS} msgpack entries")


def restore(data: bytes, where: str):
    """The tree ``data`` encodes (see the module docstring)."""
    counter = _Counter(where)

    def on_map(pairs):
        counter.add(len(pairs) + 1)
        if not all(isinstance(k, str) for k, _ in pairs):  # flax writes text keys only
            key = next(k for k, _ in pairs if not isinstance(k, str))
            raise CorruptFileError(f"{where}: a map key that is not text: {key!r}"[:300])
        node = dict(pairs)
        # maps are built innermost first: a chunked array's chunks are arrays by now
        return _chunked_array(node, where) if node.get(_CHUNKED) is True else node

    def on_list(items):
        counter.add(len(items) + 1)
        return items

    def on_ext(code, payload):
        counter.add(1)
        if code in (_NDARRAY, _SCALAR):
            array = _ndarray(payload, where)
            return array[()] if code == _SCALAR else array
        if code == _COMPLEX:
            parts = _unpack(payload, where, raw=False)
            if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, (int, float)) for p in parts)):
                raise CorruptFileError(f"{where}: a complex number that is not [real, imag]")
            return complex(*parts)
        raise CorruptFileError(f"{where}: msgpack extension type {code} (flax writes 1, 2 and 3)")

    tree = _unpack(data, where, raw=False, object_pairs_hook=on_map, list_hook=on_list, ext_hook=on_ext)
    _check_depth(tree, where)
    return tree


def _unpack(data, where, **options):
    try:
        return msgpack.unpackb(data, strict_map_key=False, **options)
    except (LoadLimitError, CorruptFileError):
        raise
    except MSGPACK_ERRORS as exc:  # from msgpack or from decoding an array's bytes in on_ext
        raise CorruptFileError(f"{where}: not a readable flax msgpack file: {type(exc).__name__}: {exc}") from None


def _ndarray(payload: bytes, where: str) -> np.ndarray:
    fields = _unpack(payload, where, raw=True)
    if not (isinstance(fields, list) and len(fields) == 3):
        raise CorruptFileError(f"{where}: an array entry that is not [shape, dtype, bytes]")
    shape, dtype_name, buffer = fields
    if not (isinstance(shape, list) and all(isinstance(n, int) and 0 <= n < 1 << 62 for n in shape)):
        raise CorruptFileError(f"{where}: an array shape that is not a list of sizes: {shape!r}"[:300])
    if len(shape) > 64:
        raise CorruptFileError(f"{where}: an array of {len(shape)} dimensions")
    name = dtype_name.decode("ascii", "replace") if isinstance(dtype_name, bytes) else None
    dtype = DTYPES.get(name) if name else None
    if dtype is None:
        raise CorruptFileError(f"{where}: array dtype {dtype_name!r} is not one nkserde reads"[:300])
    if not isinstance(buffer, bytes) or math.prod(shape) * dtype.itemsize != len(buffer):
        size = len(buffer) if isinstance(buffer, bytes) else type(buffer).__name__
        raise CorruptFileError(f"{where}: a {name}{shape} array with {size} bytes of data"[:300])
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _check_depth(tree, where: str) -> None:
    # iteratively: whatever walks the tree later recurses
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise LoadLimitError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _chunked_array(node: dict, where: str) -> np.ndarray:
    shape, chunks = node.get("shape"), node.get("chunks")
    if not (isinstance(shape, dict) and isinstance(chunks, dict)):
        raise CorruptFileError(f"{where}: a chunked array without its shape and chunks")
    shape = [shape.get(str(i)) for i in range(len(shape))]
    chunks = [chunks.get(str(i)) for i in range(len(chunks))]
    if not all(isinstance(n, int) and n >= 0 for n in shape):
        raise CorruptFileError(f"{where}: a chunked array's shape is not a list of sizes")
    if not chunks or not all(isinstance(c, np.ndarray) and c.ndim == 1 for c in chunks):
        raise CorruptFileError(f"{where}: a chunked array's chunks are not flat arrays")
    if len({c.dtype for c in chunks}) != 1 or sum(c.size for c in chunks) != math.prod(shape):
        raise CorruptFileError(f"{where}: a chunked array's chunks do not make its shape {shape}")
    return np.concatenate(chunks).reshape(shape)
