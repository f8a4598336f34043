"""nkserde/saving/snapshot.py and the tree codec: round trips of arrays of every
storable dtype as numpy and as JAX arrays, of PRNG keys, Python scalars and
nested containers.

Every original is loaded into a template of the same structure holding
*different* numbers; the loaded object must have the template's types and
structure, the original's bytes, and the template must be left untouched.
(Importing netket enables jax x64.)
"""

from __future__ import annotations

import collections
import math
from typing import NamedTuple

import flax
import jax
import jax.numpy as jnp
import ml_dtypes
import netket  # noqa: F401  (enables x64)
import numpy as np
import pytest

import nkserde
from builders import assert_differs, assert_same_leaf_types, round_trip
from nkserde.errors import TemplateMismatchError, UnregisteredTypeError

assert jax.config.jax_enable_x64, "netket enables x64; the uint64/float64 JAX cases rely on it"

# --------------------------------------------------------------------------- dtypes

DTYPES = [
    np.float16,
    np.float32,
    np.float64,
    ml_dtypes.bfloat16,
    np.complex64,
    np.complex128,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]
SHAPES = [(2, 3), (), (0,), (3, 0)]


def random_array(dtype, shape, seed):
    """Arbitrary bit patterns of ``dtype``: NaNs, infinities, subnormals and
    negative zero for the floating types, extremes for the integers."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    out = raw.view(dtype).reshape(shape).copy()
    if (dtype.kind in "fc" or dtype == ml_dtypes.bfloat16) and n >= 4:
        flat = out.reshape(-1)
        flat[:4] = np.array([np.nan, np.inf, -0.0, -np.inf]).astype(dtype)
    return out


def _id(x):
    return getattr(x, "__name__", str(x))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_numpy_array_dtypes(dtype, shape, tmp_path):
    orig = {"x": random_array(dtype, shape, 0), "strided": random_array(dtype, (4, 6), 1)[::2, ::-3]}
    template = {"x": random_array(dtype, shape, 7), "strided": random_array(dtype, (2, 2), 8)}
    if math.prod(shape):
        assert_differs(orig, template)
    loaded = round_trip(orig, template, tmp_path / "a.nks")
    for key in orig:
        assert type(loaded[key]) is np.ndarray
        assert loaded[key].dtype == np.dtype(dtype) and loaded[key].shape == orig[key].shape
        assert loaded[key].tobytes() == np.ascontiguousarray(orig[key]).tobytes()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_jax_array_dtypes(dtype, shape, tmp_path):
    orig = jnp.asarray(random_array(dtype, shape, 0))
    template = jnp.asarray(random_array(dtype, shape, 7))
    assert orig.dtype == np.dtype(dtype)  # x64: no silent narrowing
    loaded = round_trip(orig, template, tmp_path / "a.nks")
    assert isinstance(loaded, jax.Array) and not isinstance(loaded, np.ndarray)
    assert loaded.dtype == orig.dtype and loaded.shape == orig.shape
    assert loaded.sharding == template.sharding
    assert np.asarray(loaded).tobytes() == np.asarray(orig).tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_numpy_scalars(dtype, tmp_path):
    """numpy scalars (np.generic) come back as numpy scalars of their type."""
    orig = random_array(dtype, (3,), 0)[1]
    template = random_array(dtype, (3,), 5)[1]
    assert isinstance(orig, np.generic)
    loaded = round_trip({"s": orig}, {"s": template}, tmp_path / "s.nks")["s"]
    assert type(loaded) is type(template) and loaded.dtype == np.dtype(dtype)
    assert np.asarray(loaded).tobytes() == np.asarray(orig).tobytes()


def test_mixed_numpy_and_jax_templates(tmp_path):
    """The template, not the file, decides numpy vs JAX for each leaf."""
    values = {"a": random_array(np.float32, (3,), 0), "b": random_array(np.int64, (2, 2), 1)}
    nkserde.save(values, tmp_path / "m.nks")
    as_jax = nkserde.load({k: jnp.zeros_like(v) for k, v in values.items()}, tmp_path / "m.nks")
    as_numpy = nkserde.load({k: np.zeros_like(v) for k, v in values.items()}, tmp_path / "m.nks")
    for key, value in values.items():
        assert isinstance(as_jax[key], jax.Array) and not isinstance(as_jax[key], np.ndarray)
        assert type(as_numpy[key]) is np.ndarray
        assert np.asarray(as_jax[key]).tobytes() == value.tobytes() == as_numpy[key].tobytes()


def test_weak_types_preserved(tmp_path):
    orig = {"weak": jnp.asarray(1.5), "strong": jnp.asarray(1.5, dtype=jnp.float64), "i": jnp.asarray(3)}
    template = {"weak": jnp.asarray(2.5), "strong": jnp.asarray(0.0, dtype=jnp.float64), "i": jnp.asarray(4)}
    assert orig["weak"].weak_type and not orig["strong"].weak_type
    loaded = round_trip(orig, template, tmp_path / "w.nks")
    assert_same_leaf_types(loaded, template)
    assert (loaded["weak"] * jnp.ones(2, jnp.float32)).dtype == jnp.float32


def test_dtype_and_shape_mismatch_are_refused(tmp_path):
    nkserde.save({"x": np.zeros(3, np.float32)}, tmp_path / "x.nks")
    for bad in (np.zeros(3, np.float64), np.zeros(4, np.float32), jnp.zeros(3, jnp.int32)):
        with pytest.raises(TemplateMismatchError, match="x"):
            nkserde.load({"x": bad}, tmp_path / "x.nks")
    with pytest.raises(UnregisteredTypeError):
        nkserde.save(np.array([1, "a"], dtype=object), tmp_path / "o.nks")


def test_big_endian_numpy_array(tmp_path):
    """Stored little-endian, returned in the template's byte order."""
    orig = np.arange(4, dtype=">i4")
    nkserde.save(orig, tmp_path / "be.nks")
    loaded = nkserde.load(np.zeros(4, dtype=">i4"), tmp_path / "be.nks")
    assert loaded.tolist() == orig.tolist() and loaded.dtype == np.dtype(">i4")
    assert nkserde.load(np.zeros(4, dtype="<i4"), tmp_path / "be.nks").tolist() == orig.tolist()


# --------------------------------------------------------------------------- PRNG keys


@pytest.mark.parametrize("impl", [None, "rbg", "unsafe_rbg"])
def test_typed_prng_keys(impl, tmp_path):
    orig = {"one": jax.random.key(0, impl=impl), "many": jax.random.split(jax.random.key(1, impl=impl), 3)}
    orig["one"] = jax.random.split(orig["one"])[1]  # not a plain seed
    template = {"one": jax.random.key(5, impl=impl), "many": jax.random.split(jax.random.key(6, impl=impl), 3)}
    assert_differs(orig, template)
    loaded = round_trip(orig, template, tmp_path / "k.nks")
    for key in orig:
        assert jax.dtypes.issubdtype(loaded[key].dtype, jax.dtypes.prng_key)
        assert loaded[key].dtype == orig[key].dtype and loaded[key].shape == orig[key].shape
        assert str(jax.random.key_impl(loaded[key])) == str(jax.random.key_impl(orig[key]))
        assert (
            np.asarray(jax.random.key_data(loaded[key])).tobytes()
            == np.asarray(jax.random.key_data(orig[key])).tobytes()
        )
    if impl is None:  # the keys draw the same numbers (one impl: each compiles its own)
        a = jax.random.normal(orig["one"], (4,))
        b = jax.random.normal(loaded["one"], (4,))
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_typed_key_impl_mismatch_is_refused(tmp_path):
    nkserde.save(jax.random.key(0), tmp_path / "k.nks")
    with pytest.raises(TemplateMismatchError):
        nkserde.load(jax.random.key(0, impl="rbg"), tmp_path / "k.nks")
    with pytest.raises(TemplateMismatchError):  # a typed key is not its raw data
        nkserde.load(jax.random.PRNGKey(0), tmp_path / "k.nks")


def test_raw_prng_keys(tmp_path):
    orig = {"key": jax.random.split(jax.random.PRNGKey(0))[1], "keys": jax.random.split(jax.random.PRNGKey(1), 4)}
    template = {"key": jax.random.PRNGKey(9), "keys": jax.random.split(jax.random.PRNGKey(10), 4)}
    assert orig["key"].dtype == jnp.uint32
    loaded = round_trip(orig, template, tmp_path / "r.nks")
    assert_same_leaf_types(loaded, template)
    a = jax.random.uniform(orig["key"], (3,))
    b = jax.random.uniform(loaded["key"], (3,))
    assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


# --------------------------------------------------------------------------- Python scalars


SCALARS = {
    "int": (12345, 0),
    "int_neg": (-(2**63), 1),
    "int_u64_max": (2**64 - 1, 1),
    "int_big": (2**64 + 5, 1),
    "int_big_neg": (-(2**70) - 3, 1),
    "int_huge": (7**500, 1),
    "float": (0.1, 2.0),
    "float_nan": (float("nan"), 0.0),
    "float_inf": (float("inf"), 0.0),
    "float_ninf": (float("-inf"), 0.0),
    "float_negzero": (-0.0, 1.0),
    "float_subnormal": (5e-324, 1.0),
    "complex": (1.5 - 2.25j, 0j),
    "complex_nan": (complex(float("nan"), float("-inf")), 0j),
    "true": (True, False),
    "false": (False, True),
    "none": (None, None),
    "str": ("héllo ☃ \x00 end", "x"),
    "str_empty": ("", "x"),
    "bytes": (b"\x00\xff\x80binary", b"x"),
    "bytes_empty": (b"", b"x"),
}


def test_python_scalars(tmp_path):
    orig = {k: v for k, (v, _) in SCALARS.items()}
    template = {k: t for k, (_, t) in SCALARS.items()}
    loaded = round_trip(orig, template, tmp_path / "s.nks")
    assert list(loaded) == list(template)
    for key, value in orig.items():
        out = loaded[key]
        assert type(out) is type(value), key
        if isinstance(value, float):
            assert math.copysign(1.0, out) == math.copysign(1.0, value)
            assert out == value or (math.isnan(out) and math.isnan(value))
        elif isinstance(value, complex):
            for part in ("real", "imag"):
                x, y = getattr(out, part), getattr(value, part)
                assert x == y or (math.isnan(x) and math.isnan(y))
        else:
            assert out == value, key
    assert loaded["int_huge"] == 7**500


def test_python_scalar_widening_and_none(tmp_path):
    """An int in the file may fill a float or complex slot; a value where the
    template has None is rebuilt from the file; None in the file stays None."""
    orig = {"i2f": 3, "i2c": 4, "f2c": 0.5, "into_none": [1, np.arange(3)], "was_none": None}
    template = {"i2f": 1.0, "i2c": 1j, "f2c": 2j, "into_none": None, "was_none": 7}
    nkserde.save(orig, tmp_path / "w.nks")
    loaded = nkserde.load(template, tmp_path / "w.nks")
    assert type(loaded["i2f"]) is float and loaded["i2f"] == 3.0
    assert type(loaded["i2c"]) is complex and loaded["i2c"] == 4
    assert type(loaded["f2c"]) is complex and loaded["f2c"] == 0.5
    assert loaded["into_none"][0] == 1 and isinstance(loaded["into_none"][1], jax.Array)
    assert loaded["was_none"] is None
    with pytest.raises(TemplateMismatchError):  # never narrowing: a float into an int slot
        nkserde.load({**template, "f2c": 2}, tmp_path / "w.nks")
    nkserde.save({"z": 1j}, tmp_path / "z.nks")
    with pytest.raises(TemplateMismatchError):  # a complex into a float slot
        nkserde.load({"z": 1.0}, tmp_path / "z.nks")
    nkserde.save({"b": True}, tmp_path / "b.nks")
    with pytest.raises(TemplateMismatchError):  # bool and int are kept apart
        nkserde.load({"b": 1}, tmp_path / "b.nks")


# --------------------------------------------------------------------------- containers


class Point(NamedTuple):
    x: jax.Array
    label: str
    extra: tuple


def nested(seed):
    rng = np.random.default_rng(seed)
    return {
        "list": [rng.normal(size=2), (int(rng.integers(100)), jnp.asarray(rng.normal(size=(2, 2)))), [[], (), {}]],
        "tuple": (np.float32(rng.normal()), {"deep": [{"deeper": (jnp.asarray(rng.integers(0, 9, 3)),)}]}),
        "int_keys": {3: "three", 1: [np.int8(seed)]},
        "ordered": collections.OrderedDict([("z", rng.normal(size=1)), ("a", float(rng.normal()))]),
        "frozen": flax.core.FrozenDict({"k": jnp.asarray(rng.normal(size=3))}),
        "point": Point(jnp.asarray(rng.normal(size=2)), f"p{seed}", (1, float(seed))),
        "empty_array": np.zeros((0, 2)),
    }


def test_nested_containers(tmp_path):
    orig, template = nested(0), nested(1)
    assert_differs(orig, template)
    loaded = round_trip(orig, template, tmp_path / "n.nks")
    assert_same_leaf_types(loaded, template)
    assert list(loaded["int_keys"]) == [3, 1]  # int keys stay ints, in order
    assert type(loaded["list"]) is list and type(loaded["list"][1]) is tuple
    assert loaded["list"][2] == [[], (), {}] and type(loaded["list"][2][1]) is tuple
    assert type(loaded["ordered"]) is collections.OrderedDict and list(loaded["ordered"]) == ["z", "a"]
    assert type(loaded["frozen"]) is flax.core.FrozenDict
    assert type(loaded["point"]) is Point and loaded["point"].label == "p0"
    assert type(loaded["point"].extra) is tuple and loaded["point"].extra == (1, 0.0)


def test_container_mismatch_is_refused(tmp_path):
    nkserde.save({"a": [1, 2], "b": {"c": 1.0}}, tmp_path / "c.nks")
    for bad in (
        {"a": [1, 2, 3], "b": {"c": 1.0}},
        {"a": [1, 2], "b": {"d": 1.0}},
        {"a": [1, 2]},
        {"a": [1, 2], "b": {"c": 1.0}, "e": 0},
    ):
        with pytest.raises(TemplateMismatchError):
            nkserde.load(bad, tmp_path / "c.nks")
