"""The one walk over the nested dicts and lists of a state dict: in memory,
encoded for a header, or read from a file NetKet wrote.

Every tree nkserde handles is dicts and lists down to leaves (arrays,
scalars). What else a walk sees through or stops at (a per-process value,
a marker such as ``{"@per_process": [...]}``) the caller says: with
``children`` for :func:`walk` and :func:`leaves`, with ``is_leaf`` for
:func:`map_leaves`.

A path is the tuple of keys and list indices from the root to a node
(``()`` for the root), as ``nkserde.errors.format_path`` prints them.

Trees decoded from a file's bytes are walked here only once their depth is
bounded (``format.tree_codec.decode``, ``format.flax_msgpack``): those two
recurse on their own, with a depth limit, because they must stop an
untrusted tree before any other walk reaches it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

Entries = Iterable[tuple[Any, Any]]


def entries(node) -> Entries:
    """A dict's ``(key, value)`` pairs, a list's ``(index, item)`` pairs;
    none for any other node (a leaf)."""
    if isinstance(node, dict):
        return node.items()
    if isinstance(node, list):
        return enumerate(node)
    return ()


def walk(tree, children: Callable[[Any], Entries] = entries) -> Iterator[tuple[tuple, Any]]:
    """Every node of ``tree`` as ``(path, node)``, pre-order: a node before
    the nodes it holds, and those in their order (a dict's insertion order,
    a list's). ``children(node)`` gives a node's ``(key, child)`` pairs
    (default :func:`entries`); a node it gives none for is a leaf.
    Iterative: any depth; the tree must not change during the walk."""
    for path, node, _ in _nodes(tree, children):
        yield path, node


def leaves(tree, children: Callable[[Any], Entries] = entries) -> Iterator[tuple[tuple, Any]]:
    """The ``(path, node)`` of :func:`walk` whose node has no children:
    arrays, scalars, empty dicts and lists, and whatever ``children`` stops
    at; in :func:`walk`'s order."""
    for path, node, leaf in _nodes(tree, children):
        if leaf:
            yield path, node


def _nodes(tree, children):
    pending = [iter([((), tree)])]  # per level: the (path, node) not yet visited
    while pending:
        for path, node in pending[-1]:
            below = [(path + (key,), child) for key, child in children(node)]
            yield path, node, not below
            if below:
                pending.append(iter(below))
                break
        else:
            pending.pop()


def map_leaves(fn: Callable[[Any], Any], tree, is_leaf: Callable[[Any], bool] | None = None):
    """``tree`` with every dict and list rebuilt (the same keys, in the same
    order) and ``fn(node)`` in place of every other node, and of every
    node ``is_leaf(node)`` is true of (a marker dict). ``fn`` is called in
    :func:`walk`'s order. Recursive, for the trees nkserde builds or has
    bounded (tens of levels)."""
    if is_leaf is not None and is_leaf(tree):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_leaves(fn, v, is_leaf) for k, v in tree.items()}
    if isinstance(tree, list):
        return [map_leaves(fn, v, is_leaf) for v in tree]
    return fn(tree)
