"""Property tests (hypothesis): any tree of the values ``save`` accepts
round-trips bit for bit, through ``load_state_dict`` (no template) and
``load`` into the tree itself; anything else is refused at save time with
an nkserde error naming its path. Example counts are modest for CI time."""

from __future__ import annotations

import copy

import math
import struct
import tempfile
from pathlib import Path

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nkserde
from nkserde.errors import UnregisteredTypeError
from nkserde.format.layout import DTYPES

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@st.composite
def arrays(draw):
    """Any storable dtype with any bit pattern (NaNs, non-canonical int4),
    0-d and zero-size shapes, C or Fortran order, non-contiguous views,
    big-endian byte order."""
    dtype = DTYPES[draw(st.sampled_from(sorted(DTYPES)))]
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    layout = draw(st.sampled_from(["C", "F", "strided", "big-endian"]))
    full = (shape[0] * 2, *shape[1:]) if layout == "strided" and shape else shape
    n = math.prod(full) * dtype.itemsize
    raw = draw(st.binary(min_size=n, max_size=n))
    a = np.frombuffer(raw, np.uint8).view(dtype).reshape(full) if n else np.zeros(full, dtype)
    if layout == "strided" and shape:
        a = a[::2]
    elif layout == "F":
        a = np.asfortranarray(a)
    elif layout == "big-endian" and dtype.itemsize > 1 and dtype.byteorder != "|" and dtype.kind in "biufc":
        a = a.byteswap().view(dtype.newbyteorder(">"))  # same values, big-endian bytes
    return a


keys = st.one_of(st.text(max_size=6).filter(lambda k: not k.startswith("@")), st.integers(-(2**70), 2**70))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**100), 2**100),
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(allow_nan=True),
    st.text(max_size=12),
    st.binary(max_size=12),
)
trees = st.recursive(
    st.one_of(scalars, arrays()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple), st.dictionaries(keys, inner, max_size=4)
    ),
    max_leaves=12,
)


def _stored_keys_collide(tree) -> bool:
    if isinstance(tree, dict):
        stored = [str(k) for k in tree]
        return len(set(stored)) != len(stored) or any(_stored_keys_collide(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(_stored_keys_collide(v) for v in tree)
    return False


def _little(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a


def assert_same(got, want, *, template: bool, path="<root>"):
    """Bit for bit: arrays by dtype, shape and bytes; floats by their bits
    (NaN payloads, -0.0). Without a template, tuples come back as lists and
    int keys as their decimal strings."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), path
        # files are little-endian; a template gives its own byte order back
        want = want if template else _little(want)
        assert got.shape == want.shape and got.dtype == want.dtype, (path, got.dtype, want.dtype)
        assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), path
    elif isinstance(want, dict):
        assert type(got) is dict, path
        wanted = {(k if template else str(k)): v for k, v in want.items()}
        assert list(got) == list(wanted), path
        for k, v in wanted.items():
            assert_same(got[k], v, template=template, path=f"{path}/{k}")
    elif isinstance(want, (list, tuple)):
        assert type(got) is (type(want) if template else list), path
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, template=template, path=f"{path}/{i}")
    elif isinstance(want, float):
        assert type(got) is float and struct.pack("<d", got) == struct.pack("<d", want), (path, got, want)
    elif isinstance(want, complex):
        assert type(got) is complex, path
        assert struct.pack("<dd", got.real, got.imag) == struct.pack("<dd", want.real, want.imag), path
    else:
        assert type(got) is type(want) and got == want, (path, got, want)


@SETTINGS
@given(tree=trees)
def test_round_trip_bit_for_bit(tree):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.nks"
        if _stored_keys_collide(tree):
            with pytest.raises(UnregisteredTypeError, match="are both stored as"):
                nkserde.save({"t": tree}, path)
            assert not path.exists()
            return
        nkserde.save({"t": tree}, path)
        assert_same(nkserde.load_state_dict(path)["t"], tree, template=False)
        assert_same(nkserde.load({"t": tree}, path)["t"], tree, template=True)
        nkserde.verify(path)


unstorable = st.sampled_from(
    [
        np.array(["text"]),
        np.array([b"by"]),
        np.array(["2024-01-01"], dtype="datetime64[D]"),
        np.array([5], dtype="timedelta64[s]"),
        np.array([None, 1], dtype=object),
        np.zeros(2, "V3"),
        np.zeros(1, [("x", "<f8")]),
        {1, 2},
        frozenset(),
        object(),
        range(3),
        Ellipsis,
        "bad \ud800 text",
        {"ok": 1, 2.5: 0},
        {"@reserved": 1},
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=trees, bad=unstorable, where=st.lists(st.sampled_from(["a", "b", 0, 1]), max_size=3))
def test_unstorable_value_is_refused_naming_its_path(tree, bad, where):
    # plant ``bad`` at ``where`` (dict keys and list positions) inside the
    # generated tree: what is on the way is kept where it is a dict or a
    # list, replaced where it is not
    root = {"t": copy.deepcopy(tree)}
    parent, key, path = root, "t", ["t"]
    for step in where:
        node = parent.get(key) if isinstance(parent, dict) else parent[key]
        if isinstance(step, str) and not isinstance(node, dict):
            node = parent[key] = {}
        elif not isinstance(step, str) and not isinstance(node, list):
            node = parent[key] = []
        if isinstance(node, list):
            node.extend([0] * (step + 1 - len(node)))
        parent, key = node, step
        path.append(str(step))
    parent[key] = bad
    expected = "/".join(path)  # a bad dict key: the path of its dict
    with tempfile.TemporaryDirectory() as d:
        with pytest.raises(UnregisteredTypeError) as raised:
            nkserde.save(root, Path(d) / "t.nks")
        assert str(raised.value).startswith(expected + ":"), (str(raised.value), expected)
        assert list(Path(d).iterdir()) == []
