"""Plain tree <-> msgpack-safe tree.

Arrays are replaced by ``{"@array": i}`` (an index into the header's array
table); values msgpack cannot carry exactly get a one-key marker map:
``{"@int": "<decimal>"}`` for integers beyond 64 bits and
``{"@complex": [re, im]}``. Keys starting with ``@`` are therefore reserved;
the layer above never produces them in user data.

A per-process value (``placement.PerProcess``) of a run of P processes becomes
``{"@per_process": [t_0, ..., t_{P-1}]}``, one subtree per process with the
same structure; their arrays are rows of one stacked ``[P, ...]`` array each,
referenced as ``{"@stacked": i}`` (row r in t_r). It decodes to
``placement.ProcessValues``.

Encoding checks what a file can hold, naming the path of what it cannot:
keys and strings are text, arrays of a dtype a file stores (layout.py).
"""

from __future__ import annotations

import numpy as np

from ..types import nested
from ..errors import UnregisteredTypeError, format_path
from ..types.placement import GlobalArray, PerProcess, Primary, ProcessValues
from .layout import check_dtype, check_text

ARRAY = "@array"
STACKED = "@stacked"
PER_PROCESS = "@per_process"
PRIMARY = "@primary"  # only while several processes compare their trees
BIGINT = "@int"
COMPLEX = "@complex"
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1
# nesting of a tree read from a file: NetKet states are ~15 deep; loading
# and migrating recurse a few Python frames per level
MAX_DEPTH = 128

# The keys that mark a registered object in a stored tree: its type name
# and schema version (the save's snapshot writes them; readers tell objects by them)
TYPE, VERSION = "@type", "@version"
MARKERS = (TYPE, VERSION)


def fields_of(node: dict) -> dict:
    """The fields of a stored object ``{"@type", "@version", **fields}`` (or
    of a plain dict: all its entries), in stored order."""
    return {k: v for k, v in node.items() if k not in MARKERS}


def array_ref(node) -> int | None:
    """The array index of an encoded ``{"@array": i}``, else None."""
    if isinstance(node, dict) and len(node) == 1 and isinstance(node.get(ARRAY), int):
        return node[ARRAY]
    return None


def encode(
    tree,
    arrays: list,
    paths: list | None = None,
    *,
    rank: int = 0,
    n_processes: int = 1,
    deferred: list | None = None,
    types: dict | None = None,
    path=(),
):
    """Returns the msgpack-safe tree; appends every array (numpy array or
    GlobalArray) to ``arrays`` in tree order and its path to ``paths``, and
    records in ``types`` the ``{type name: schema version}`` of every stored
    object (a ``{"@type", "@version", ...}`` dict: what a file's metadata
    lists), in the order met: tree order, but for the ``Primary`` values
    deferred (below), met when :func:`encode_deferred` encodes them; a type
    met again keeps its first place and takes its last version. Tuples
    become lists. In a per-process value, an array ``a`` of process
    ``rank`` becomes row ``rank`` of a ``[n_processes, ...]`` array.

    With several processes, a ``Primary`` value becomes ``{"@primary": None}``
    and, on process 0, is appended to ``deferred``: :func:`encode_deferred`
    then fills it in, numbering its arrays after all the others, so that
    the arrays every process has get the same numbers everywhere. ``path``:
    where ``tree`` sits (for errors and ``paths``)."""
    return _Encoder(arrays, paths, rank, n_processes, deferred, types).node(tree, tuple(path), stacked=False)


class _Encoder:
    """One pass of :func:`encode`: where arrays, their paths and the stored
    types go, and this process's place among the others."""

    def __init__(self, arrays: list, paths, rank: int, n_processes: int, deferred: list | None, types: dict | None):
        self.arrays, self.paths, self.deferred, self.types = arrays, paths, deferred, types
        self.rank, self.n_processes = rank, n_processes

    def node(self, tree, path: tuple, stacked: bool):
        """``stacked``: inside a per-process value (its arrays become rows)."""
        if isinstance(tree, Primary):
            if self.n_processes == 1 or self.deferred is None:
                return self.node(tree.value, path, stacked)
            node = {PRIMARY: None}
            if self.rank == 0:
                self.deferred.append((node, tree.value, path))
            return node
        if isinstance(tree, dict):
            for k in tree:
                check_text(k, path, "dict key")
            if self.types is not None and isinstance(tree.get(TYPE), str):
                version = tree.get(VERSION)
                # a file being migrated may hold anything there (an array): the metadata keeps ints
                self.types[tree[TYPE]] = version if type(version) is int else None
            return {k: self.node(v, path + (k,), stacked) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            return [self.node(v, path + (i,), stacked) for i, v in enumerate(tree)]
        if isinstance(tree, ProcessValues):
            return _encode_process_values(tree, self.arrays, self.paths, path, self.types)
        if isinstance(tree, PerProcess):
            inner = self.node(tree.value, path, stacked=True)
            return inner if stacked else {PER_PROCESS: [inner]}  # nested: already per process
        if isinstance(tree, (np.ndarray, GlobalArray)):
            return self.array(tree, path, stacked)
        return _scalar(tree, path)

    def array(self, array, path: tuple, stacked: bool) -> dict:
        check_dtype(array.dtype, path)
        if stacked:
            if isinstance(array, GlobalArray):
                raise TypeError(f"{path}: a per-process value cannot hold an array spread over processes")
            row = array[np.newaxis]
            if self.n_processes > 1:
                start = (self.rank,) + (0,) * array.ndim
                row = GlobalArray((self.n_processes, *array.shape), array.dtype, ((start, row),))
            self.arrays.append(row)
        else:
            self.arrays.append(array)
        if self.paths is not None:
            self.paths.append(path)
        return {STACKED if stacked else ARRAY: len(self.arrays) - 1}


def _scalar(value, path):
    if isinstance(value, str):
        check_text(value, path, "string")
        return value
    if isinstance(value, bool) or value is None or isinstance(value, (bytes, float)):
        return value
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _UINT_MAX else {BIGINT: str(value)}
    if isinstance(value, complex):
        return {COMPLEX: [value.real, value.imag]}
    raise UnregisteredTypeError(f"{format_path(path)}: cannot store a value of type {type(value).__name__}")


def _encode_process_values(tree: ProcessValues, arrays: list, paths, path, types: dict | None) -> dict:
    """Every process's value as read from a file, written again by one
    process (a migration): the arrays at one place of every value are
    stacked into one ``[P, ...]`` array, as the processes' writes make it."""
    encoded = []  # (subtree, its arrays) of each process
    for value in tree.values:
        rows: list = []
        encoded.append((encode(value, rows, types=types, path=path), rows))
    if any(len(rows) != len(encoded[0][1]) for _, rows in encoded):
        raise UnregisteredTypeError(f"{format_path(path)}: per-process values of different structures")
    first = len(arrays)
    for j in range(len(encoded[0][1])):
        column = [rows[j] for _, rows in encoded]
        if any(isinstance(a, GlobalArray) or a.shape != column[0].shape or a.dtype != column[0].dtype for a in column):
            raise UnregisteredTypeError(f"{format_path(path)}: per-process arrays of different shapes or dtypes")
        arrays.append(np.stack(column))
        if paths is not None:
            paths.append(path)

    def as_row(node):  # an array of one process's subtree: its row of the stacked one
        return {STACKED: first + node[ARRAY]} if _is_array(node) else node

    return {PER_PROCESS: [nested.map_leaves(as_row, sub, _is_array) for sub, _ in encoded]}


def _is_array(node) -> bool:
    return isinstance(node, dict) and len(node) == 1 and ARRAY in node


def encode_deferred(deferred: list, arrays: list, paths: list | None = None, types: dict | None = None) -> None:
    """Fills in the ``{"@primary": ...}`` nodes :func:`encode` deferred (on
    process 0), appending their arrays and recording their types; a value
    nested in one is encoded in its place."""
    for node, value, where in deferred:
        node[PRIMARY] = encode(value, arrays, paths, types=types, path=where)


def _same_structure(a, b) -> bool:
    """The same containers, keys, types and array shapes (the processes'
    values of one per-process field, as they are written)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_structure(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same_structure, a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and a.dtype == b.dtype
    return not isinstance(b, (dict, list, np.ndarray))  # scalars may differ in type (None, int)


def _array_ref(value, arrays) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < len(arrays):
        raise ValueError(f"array reference {value!r} out of range")
    return value


def decode(tree, arrays: list, used: set, _row: tuple | None = None, _depth: int = 0):
    """Inverse of :func:`encode`. Raises ValueError on a malformed marker, an
    array referenced twice or out of range, or a tree nested deeper than
    ``MAX_DEPTH`` (whatever walks the tree later recurses too). ``_row``:
    (process, count) inside a per-process value."""
    if _depth > MAX_DEPTH:
        raise ValueError(f"the tree is nested deeper than {MAX_DEPTH} levels")
    _depth += 1
    if isinstance(tree, dict):
        if len(tree) == 1:
            ((key, value),) = tree.items()
            if key == ARRAY:
                i = _array_ref(value, arrays)
                if i in used or (STACKED, i) in used:
                    raise ValueError(f"array {i} referenced twice")
                used.add(i)
                return arrays[i]
            if key == STACKED:
                i = _array_ref(value, arrays)
                if _row is None:
                    raise ValueError(f"stacked array {i} outside a per-process value")
                rank, count = _row
                if arrays[i].ndim < 1 or arrays[i].shape[0] != count:
                    raise ValueError(f"stacked array {i} has shape {list(arrays[i].shape)}, expected {count} rows")
                if (i, rank) in used or i in used:
                    raise ValueError(f"array {i} referenced twice")
                used.update(((i, rank), (STACKED, i)))
                return arrays[i][rank]
            if key == PER_PROCESS:
                if _row is not None or not isinstance(value, list) or not value:
                    raise ValueError("malformed per-process value")
                values = [decode(t, arrays, used, (r, len(value)), _depth) for r, t in enumerate(value)]
                if any(not _same_structure(v, values[0]) for v in values[1:]):
                    raise ValueError("per-process values of different structures")
                return ProcessValues(values)
            if key == BIGINT:
                if not isinstance(value, str) or not value.lstrip("-").isdigit() or len(value) > 4300:
                    raise ValueError(f"malformed integer {value!r}")
                return int(value)
            if key == COMPLEX:
                if not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, float) for v in value):
                    raise ValueError(f"malformed complex {value!r}")
                return complex(value[0], value[1])
        return {k: decode(v, arrays, used, _row, _depth) for k, v in tree.items()}
    if isinstance(tree, list):
        return [decode(v, arrays, used, _row, _depth) for v in tree]
    if tree is None or isinstance(tree, (bool, int, float, str, bytes)):
        return tree
    raise ValueError(f"unexpected value of type {type(tree).__name__} in header")


def outline(tree, _path=(), _per_process=False):
    """The encoded (header) tree without its arrays, as a sequence of
    ``(kind, path, payload, per_process)`` in tree order:

    * ``("map", path, node)`` for every map that is not a marker (its
      scalar entries can be read from ``node``);
    * ``("array", path, i)``: array ``i`` of the array table (in a
      per-process value: the stacked ``[P, ...]`` array, listed once);
    * ``("value", path, v)``: anything else, decoded (an integer beyond 64
      bits, a complex, a list of such values, ``{}``, ``None``...).

    Per-process values are outlined by their first process's subtree (all
    have the same structure), ``per_process`` True. Raises ValueError on a
    malformed marker."""
    if isinstance(tree, dict):
        if len(tree) == 1:
            ((key, value),) = tree.items()
            if key in (ARRAY, STACKED):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ValueError(f"malformed array reference {value!r}")
                yield "array", _path, value, _per_process
                return
            if key == PER_PROCESS:
                if not isinstance(value, list) or not value:
                    raise ValueError("malformed per-process value")
                yield from outline(value[0], _path, True)
                return
            if key in (BIGINT, COMPLEX):
                yield "value", _path, decode(tree, [], set()), _per_process
                return
        if not tree:
            yield "value", _path, {}, _per_process
            return
        yield "map", _path, tree, _per_process
        for k, v in tree.items():
            yield from outline(v, _path + (k,), _per_process)
    elif isinstance(tree, list) and any(isinstance(v, (dict, list)) for v in tree):
        for i, v in enumerate(tree):
            yield from outline(v, _path + (i,), _per_process)
    else:
        yield "value", _path, decode(tree, [], set()), _per_process
