"""What the processes of a multi-process save must agree on, and the
per-process values they need not: the encoded tree with its per-process
subtrees reduced to their structure and process 0's records removed, each
array's dtype, shape and (replicated ones) checksum; where two processes'
descriptions first differ, named as a ProcessMismatchError; and the
per-process subtrees gathered on each process and merged by process 0.

Works on trees encoded by nkserde.format.tree_codec (``@per_process`` and
``@primary`` markers); no file, no process: the rounds are
nkserde.format.together's."""

from __future__ import annotations

import hashlib
import itertools
from typing import NamedTuple

import msgpack

from ..types import nested
from ..errors import ProcessMismatchError, format_path
from . import tree_codec


class ArrayInfo(NamedTuple):
    """What every process must agree on about an array: dtype, shape, and
    the checksum of a replicated one (None for one spread over processes)."""

    dtype: str
    shape: list
    checksum: int | None


def agreed_part(encoded, described: list[ArrayInfo]) -> dict:
    """What must be identical on every process: the tree without its
    per-process values and process 0's records, and each array's dtype,
    shape and kind (the checksum of a replicated one)."""
    return {"tree": strip_per_process(encoded), "arrays": [list(a) for a in described]}


def agreed_digest(agreed) -> bytes:
    return hashlib.sha256(msgpack.packb(agreed, use_bin_type=True)).digest()[:16]


def _marker(node, key: str) -> bool:
    return isinstance(node, dict) and set(node) == {key}


def _per_process_or_primary(node) -> bool:
    """A per-process value or process 0's record: where the processes'
    encoded trees may differ."""
    return _marker(node, tree_codec.PER_PROCESS) or _marker(node, tree_codec.PRIMARY)


def strip_per_process(tree):
    """The tree with per-process subtrees reduced to their structure and
    process 0's records removed: what must be identical on every process."""

    def strip(node):
        if _marker(node, tree_codec.PRIMARY):
            return {tree_codec.PRIMARY: None}
        if _marker(node, tree_codec.PER_PROCESS):
            return {tree_codec.PER_PROCESS: _structure(node[tree_codec.PER_PROCESS][0])}
        return node

    return nested.map_leaves(strip, tree, is_leaf=_per_process_or_primary)


def _structure(tree):
    """Array references kept, any other leaf as its type's name."""
    return nested.map_leaves(
        lambda node: node if isinstance(node, dict) else type(node).__name__,
        tree,
        is_leaf=lambda node: _marker(node, tree_codec.STACKED) or _marker(node, tree_codec.ARRAY),
    )


def first_difference(a, b, path=()):
    if type(a) is not type(b):
        return path, a, b
    if isinstance(a, dict):
        if set(a) != set(b):
            return path, sorted(a), sorted(b)
        for k in a:
            found = first_difference(a[k], b[k], path + (k,))
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return path, f"list of {len(a)}", f"list of {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, path + (i,))
            if found:
                return found
        return None
    return None if a == b else (path, a, b)


def per_process_values(tree) -> list:
    """This process's per-process subtrees, in the tree's order."""
    return [
        node[tree_codec.PER_PROCESS][0]
        for _, node in nested.leaves(tree, _outside_per_process_or_primary)
        if _marker(node, tree_codec.PER_PROCESS)
    ]


def _outside_per_process_or_primary(node):
    return () if _per_process_or_primary(node) else nested.entries(node)


def merge_per_process(tree, per_process: list[list]):
    """Process 0's tree with each per-process subtree replaced by the list
    of every process's (``per_process[r]``: process r's, in tree order),
    and process 0's records in place."""
    position = itertools.count()

    def merge(node):
        if _marker(node, tree_codec.PRIMARY):
            return node[tree_codec.PRIMARY]
        if _marker(node, tree_codec.PER_PROCESS):
            k = next(position)
            return {tree_codec.PER_PROCESS: [values[k] for values in per_process]}
        return node

    return nested.map_leaves(merge, tree, is_leaf=_per_process_or_primary)


def name_difference(path, agreed: dict, paths: list, rank: int, detail: bytes):
    """Raises the ProcessMismatchError naming where process ``rank``'s
    agreed part (``detail``: msgpack, as it sent it) first differs from
    process 0's ``agreed`` (``paths``: the paths of its arrays)."""
    other = msgpack.unpackb(detail, raw=False, strict_map_key=False)
    found = first_difference(agreed["tree"], other["tree"])
    if found:
        where, a, b = found
        raise ProcessMismatchError(
            f"{path}: {format_path(where)}: process 0 has {a!r:.120}, process {rank} has {b!r:.120}; "
            "values that are not marked per-process must be the same on every process"
        )
    mine, theirs = [ArrayInfo(*a) for a in agreed["arrays"]], [ArrayInfo(*a) for a in other["arrays"]]
    if len(mine) != len(theirs):
        raise ProcessMismatchError(f"{path}: process {rank} has {len(theirs)} arrays, process 0 has {len(mine)}")
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if (a.dtype, a.shape) != (b.dtype, b.shape) or (a.checksum is None) != (b.checksum is None):
            raise ProcessMismatchError(
                f"{path}: {format_path(paths[i])}: process 0 has {a.dtype}{a.shape}, "
                f"process {rank} has {b.dtype}{b.shape}"
            )
        if a.checksum != b.checksum:
            raise ProcessMismatchError(
                f"{path}: {format_path(paths[i])}: the replicated array {a.dtype}{a.shape} differs between "
                f"process 0 and process {rank} (checksums {a.checksum:x} and {b.checksum:x}); replicated values "
                "must be equal on every process"
            )
    raise ProcessMismatchError(f"{path}: process {rank}'s state differs from process 0's")
