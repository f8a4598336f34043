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
from typing import NamedTuple

import msgpack

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


def strip_per_process(tree):
    """The tree with per-process subtrees reduced to their structure and
    process 0's records removed: what must be identical on every process."""
    if isinstance(tree, dict):
        if set(tree) == {tree_codec.PRIMARY}:
            return {tree_codec.PRIMARY: None}
        if set(tree) == {tree_codec.PER_PROCESS}:
            return {tree_codec.PER_PROCESS: _structure(tree[tree_codec.PER_PROCESS][0])}
        return {k: strip_per_process(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [strip_per_process(v) for v in tree]
    return tree


def _structure(tree):
    if isinstance(tree, dict):
        if set(tree) in ({tree_codec.STACKED}, {tree_codec.ARRAY}):
            return tree
        return {k: _structure(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_structure(v) for v in tree]
    return type(tree).__name__


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


def per_process_values(tree, out=None) -> list:
    """This process's per-process subtrees, in the tree's order."""
    out = [] if out is None else out
    if isinstance(tree, dict):
        if set(tree) == {tree_codec.PER_PROCESS}:
            out.append(tree[tree_codec.PER_PROCESS][0])
        elif set(tree) != {tree_codec.PRIMARY}:
            for v in tree.values():
                per_process_values(v, out)
    elif isinstance(tree, list):
        for v in tree:
            per_process_values(v, out)
    return out


def merge_per_process(tree, per_process: list[list]):
    """Process 0's tree with each per-process subtree replaced by the list
    of every process's (``per_process[r]``: process r's, in tree order),
    and process 0's records in place."""
    position = iter(range(10**12))

    def merge(node):
        if isinstance(node, dict):
            if set(node) == {tree_codec.PRIMARY}:
                return node[tree_codec.PRIMARY]
            if set(node) == {tree_codec.PER_PROCESS}:
                k = next(position)
                return {tree_codec.PER_PROCESS: [values[k] for values in per_process]}
            return {key: merge(v) for key, v in node.items()}
        if isinstance(node, list):
            return [merge(v) for v in node]
        return node

    return merge(tree)


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
