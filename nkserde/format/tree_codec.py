"""Plain tree <-> msgpack-safe tree.

Arrays are replaced by ``{"@array": i}`` (an index into the header's array
table); values msgpack cannot carry exactly get a one-key marker map:
``{"@int": "<decimal>"}`` for integers beyond 64 bits and
``{"@complex": [re, im]}``. Keys starting with ``@`` are therefore reserved;
the layer above never produces them in user data.
"""

from __future__ import annotations

import numpy as np

ARRAY = "@array"
BIGINT = "@int"
COMPLEX = "@complex"
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1


def encode(tree, arrays: list):
    """Returns the msgpack-safe tree; appends every array to ``arrays`` in
    tree order. Tuples become lists."""
    if isinstance(tree, dict):
        return {k: encode(v, arrays) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [encode(v, arrays) for v in tree]
    if isinstance(tree, np.ndarray):
        arrays.append(tree)
        return {ARRAY: len(arrays) - 1}
    if isinstance(tree, bool) or tree is None or isinstance(tree, (str, bytes, float)):
        return tree
    if isinstance(tree, int):
        return tree if _INT_MIN <= tree <= _UINT_MAX else {BIGINT: str(tree)}
    if isinstance(tree, complex):
        return {COMPLEX: [tree.real, tree.imag]}
    raise TypeError(f"cannot store a value of type {type(tree).__name__} in the header")


def decode(tree, arrays: list, used: set):
    """Inverse of :func:`encode`. Raises ValueError on a malformed marker or
    an array referenced twice or out of range."""
    if isinstance(tree, dict):
        if len(tree) == 1:
            (key, value), = tree.items()
            if key == ARRAY:
                if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < len(arrays):
                    raise ValueError(f"array reference {value!r} out of range")
                if value in used:
                    raise ValueError(f"array {value} referenced twice")
                used.add(value)
                return arrays[value]
            if key == BIGINT:
                if not isinstance(value, str) or not value.lstrip("-").isdigit() or len(value) > 4300:
                    raise ValueError(f"malformed integer {value!r}")
                return int(value)
            if key == COMPLEX:
                if (not isinstance(value, list) or len(value) != 2
                        or not all(isinstance(v, float) for v in value)):
                    raise ValueError(f"malformed complex {value!r}")
                return complex(value[0], value[1])
        return {k: decode(v, arrays, used) for k, v in tree.items()}
    if isinstance(tree, list):
        return [decode(v, arrays, used) for v in tree]
    if tree is None or isinstance(tree, (bool, int, float, str, bytes)):
        return tree
    raise ValueError(f"unexpected value of type {type(tree).__name__} in header")
