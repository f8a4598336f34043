"""nkserde.types.nested: the one walk over the dicts and lists of a state dict."""

from __future__ import annotations

import numpy as np

from nkserde.types import nested
from nkserde.types.placement import PerProcess

TREE = {"a": {"x": 1, "y": [2, {"z": 3}]}, "b": [], "c": {}, "d": np.zeros(2)}


def test_walk_visits_every_node_before_what_it_holds_in_order():
    paths = [path for path, _ in nested.walk(TREE)]
    assert paths == [
        (),
        ("a",),
        ("a", "x"),
        ("a", "y"),
        ("a", "y", 0),
        ("a", "y", 1),
        ("a", "y", 1, "z"),
        ("b",),
        ("c",),
        ("d",),
    ]
    assert all(node is _at(TREE, path) for path, node in nested.walk(TREE))


def test_leaves_are_the_nodes_without_children_empty_containers_included():
    got = dict(nested.leaves(TREE))
    assert list(got) == [("a", "x"), ("a", "y", 0), ("a", "y", 1, "z"), ("b",), ("c",), ("d",)]
    assert got[("b",)] == [] and got[("c",)] == {} and got[("d",)] is TREE["d"]


def test_children_says_what_to_see_through_and_where_to_stop():
    tree = {"p": PerProcess({"k": 1}), "stop": {"@marker": {"inside": 2}}, "n": 3}

    def children(node):
        if isinstance(node, PerProcess):
            return [("value", node.value)]
        if isinstance(node, dict) and "@marker" in node:
            return ()
        return nested.entries(node)

    assert dict(nested.leaves(tree, children)) == {
        ("p", "value", "k"): 1,
        ("stop",): {"@marker": {"inside": 2}},
        ("n",): 3,
    }


def test_walk_has_no_recursion_limit():
    deep: list = []
    node = deep
    for _ in range(20_000):  # far beyond Python's recursion limit
        node.append([])
        node = node[0]
    node.append("bottom")
    ((path, leaf),) = nested.leaves(deep)
    assert leaf == "bottom" and len(path) == 20_001


def test_map_leaves_rebuilds_containers_and_applies_fn_in_walk_order():
    seen = []

    def fn(node):
        seen.append(node)
        return node * 10 if isinstance(node, int) else node

    out = nested.map_leaves(fn, {"a": [1, {"b": 2}], "c": 3, "m": {"@array": 4}, "e": {}})
    assert out == {"a": [10, {"b": 20}], "c": 30, "m": {"@array": 40}, "e": {}}
    assert seen == [1, 2, 3, 4]
    tree = {"a": [1]}
    copy = nested.map_leaves(lambda n: n, tree)
    assert copy == tree and copy is not tree and copy["a"] is not tree["a"]


def test_map_leaves_hands_a_marker_whole_to_fn():
    marker = {"@array": 4}
    out = nested.map_leaves(
        lambda n: ("ref", n["@array"]) if isinstance(n, dict) else n,
        {"m": marker, "l": [marker, 5]},
        is_leaf=lambda n: isinstance(n, dict) and set(n) == {"@array"},
    )
    assert out == {"m": ("ref", 4), "l": [("ref", 4), 5]}


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree
