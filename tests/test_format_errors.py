"""Damaged files, template mismatches and version errors: every one is a
clear nkserde.errors exception naming the file, never a raw library error."""

from __future__ import annotations


import jax.numpy as jnp
import numpy as np
import pytest

import nkserde
from nkserde.errors import (
    CorruptFileError,
    TemplateMismatchError,
    UnregisteredTypeError,
    UnsupportedVersionError,
)
from nkserde.format.layout import PREAMBLE, TRAILER


def _state():
    rng = np.random.default_rng(0)
    return {
        "parameters": {
            "Dense": {"kernel": jnp.asarray(rng.normal(size=(8, 8))), "bias": jnp.asarray(rng.normal(size=(8,)))}
        },
        "chains": np.ones((16, 8), np.int8),  # compressible: exercises the zstd codec
        "big": rng.normal(size=(300_000,)),  # > 1 MiB, raw codec
        "step": 3,
    }


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "state.nks"
    nkserde.save(_state(), path)
    return path


def _load(path):
    return nkserde.load(_state(), path)


def test_round_trip(saved):
    out = _load(saved)
    ref = _state()
    assert out["step"] == 3
    assert np.asarray(out["big"]).tobytes() == ref["big"].tobytes()
    kernel = np.asarray(out["parameters"]["Dense"]["kernel"])
    assert kernel.tobytes() == np.asarray(ref["parameters"]["Dense"]["kernel"]).tobytes()
    header = nkserde.format.read_header(saved)
    assert {a["codec"] for a in header["arrays"]} == {"raw", "zstd"}


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        _load(tmp_path / "nope.nks")


# random bytes of a fixed seed: every pytest-xdist worker collects the same cases
_NOISE = np.random.default_rng(20261201)


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00", _NOISE.bytes(100), _NOISE.bytes(5000), b"\x89NKSERD\n" + bytes(40)],
    ids=["empty", "one-zero", "noise-100", "noise-5000", "magic-then-zeros"],
)
def test_garbage_is_corrupt(tmp_path, content):
    path = tmp_path / "garbage.nks"
    path.write_bytes(content)
    with pytest.raises(CorruptFileError, match=str(path)):
        _load(path)
    with pytest.raises(CorruptFileError):
        nkserde.info(path)


def test_bad_magic(saved):
    data = bytearray(saved.read_bytes())
    data[0:8] = b"NOTMAGIC"
    saved.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="bad magic"):
        _load(saved)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.999])
def test_truncated(saved, keep):
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CorruptFileError, match=str(saved)):
        _load(saved)


def _header_span(path):
    data = path.read_bytes()
    offset, length, _, _ = TRAILER.unpack(data[-TRAILER.size :])
    return data, offset, length


def test_flipped_byte_in_header(saved):
    data, offset, length = _header_span(saved)
    for position in (offset, offset + length // 2, offset + length - 1):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        saved.write_bytes(bytes(damaged))
        with pytest.raises(CorruptFileError, match="header checksum"):
            _load(saved)


def test_flipped_byte_in_every_array(saved):
    data = saved.read_bytes()
    header = nkserde.format.read_header(saved)
    for i, entry in enumerate(header["arrays"]):
        if entry["stored"] == 0:
            continue
        damaged = bytearray(data)
        damaged[entry["offset"] + entry["stored"] // 2] ^= 0x01
        saved.write_bytes(bytes(damaged))
        with pytest.raises(CorruptFileError, match=f"array {i}.*checksum"):
            _load(saved)
        with pytest.raises(CorruptFileError, match=f"array {i}.*checksum"):
            nkserde.verify(saved)  # streams the arrays: a path of its own


def test_flipped_byte_in_trailer(saved):
    data = bytearray(saved.read_bytes())
    data[-TRAILER.size] ^= 0x01  # header offset
    saved.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError):
        _load(saved)


def test_every_single_byte_flip_is_detected_or_harmless(tmp_path):
    """Small file, every byte flipped in turn: either a CorruptFileError or
    (padding bytes only) a load equal to the original; never anything else."""
    small = {"a": np.arange(5, dtype=np.int32), "b": 1.5, "c": [None, "x"]}
    path = tmp_path / "small.nks"
    nkserde.save(small, path)
    data = path.read_bytes()
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            out = nkserde.load(small, path)
        except (CorruptFileError, UnsupportedVersionError) as exc:
            # verify (streaming, no template) refuses the file too
            with pytest.raises(type(exc)):
                nkserde.verify(path)
            continue
        assert out["a"].tobytes() == small["a"].tobytes() and out["b"] == 1.5 and out["c"] == [None, "x"], i


def test_newer_format_version(saved):
    data = bytearray(saved.read_bytes())
    magic, version, flags = PREAMBLE.unpack(data[: PREAMBLE.size])
    data[: PREAMBLE.size] = PREAMBLE.pack(magic, version + 1, flags)
    saved.write_bytes(bytes(data))
    with pytest.raises(UnsupportedVersionError, match=f"version {version + 1}.*format version {version}"):
        _load(saved)


def test_shape_mismatch_names_path_shape_and_dtype(saved):
    template = _state()
    template["parameters"]["Dense"]["kernel"] = jnp.zeros((8, 4))
    with pytest.raises(TemplateMismatchError) as info:
        nkserde.load(template, saved)
    msg = str(info.value)
    assert str(saved) in msg
    assert "parameters/Dense/kernel" in msg
    assert "float64[8, 8]" in msg and "float64[8, 4]" in msg


def test_dtype_mismatch(saved):
    template = _state()
    template["chains"] = np.ones((16, 8), np.int32)
    with pytest.raises(
        TemplateMismatchError, match=r"chains: file has array int8\[16, 8\], template has array int32\[16, 8\]"
    ):
        nkserde.load(template, saved)


def test_structure_mismatch_lists_missing_and_extra_keys(saved):
    template = _state()
    template["parameters"]["Dense2"] = template["parameters"].pop("Dense")
    with pytest.raises(
        TemplateMismatchError, match=r"parameters: .*missing in file: \['Dense2'\].*not in template: \['Dense'\]"
    ):
        nkserde.load(template, saved)


def test_scalar_kind_mismatch(saved):
    template = _state()
    template["step"] = "three"
    with pytest.raises(TemplateMismatchError, match="step"):
        nkserde.load(template, saved)


def test_unregistered_type_on_save(tmp_path):
    class Opaque:
        pass

    with pytest.raises(UnregisteredTypeError, match=r"x/1: no nkserde registration for type .*Opaque"):
        nkserde.save({"x": [1, Opaque()]}, tmp_path / "f.nks")
    assert not list(tmp_path.iterdir())  # nothing written


def test_unknown_type_name_in_file(tmp_path):
    class Thing:
        def __init__(self, v):
            self.v = v

    nkserde.register(
        Thing, name="tests.ThingToForget", to_state=lambda t: {"v": t.v}, from_state=lambda t, f: Thing(f["v"])
    )
    path = tmp_path / "thing.nks"
    nkserde.save({"t": Thing(np.ones(3))}, path)
    # A file that names a type this process has never registered: simulate by
    # rewriting the stored name with one nobody registered.
    sd = nkserde.format.read_file(path)[1]
    sd["t"]["@type"] = "somebody.Unknown"
    nkserde.format.write_file(path, sd, {})
    with pytest.raises(UnregisteredTypeError, match="somebody.Unknown"):
        nkserde.load({"t": Thing(np.zeros(3))}, path)


def test_no_raw_exceptions_from_random_headers(tmp_path):
    """A valid frame (magic, trailer, checksum) around random header bytes:
    still a CorruptFileError, never a msgpack exception."""
    from nkserde.format.checksum import checksum
    from nkserde.format.layout import END_MAGIC, FORMAT_VERSION, MAGIC

    rng = np.random.default_rng(1)
    for _ in range(200):
        header = rng.bytes(int(rng.integers(1, 64)))
        blob = PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0) + header
        blob += TRAILER.pack(PREAMBLE.size, len(header), checksum(header), END_MAGIC)
        path = tmp_path / "r.nks"
        path.write_bytes(blob)
        with pytest.raises(CorruptFileError):
            nkserde.load({}, path)


def test_header_cannot_reference_arrays_out_of_range(tmp_path):
    import msgpack

    from nkserde.format.checksum import checksum
    from nkserde.format.layout import END_MAGIC, FORMAT_VERSION, MAGIC

    header = msgpack.packb({"format_version": FORMAT_VERSION, "meta": {}, "tree": {"a": {"@array": 5}}, "arrays": []})
    blob = PREAMBLE.pack(MAGIC, FORMAT_VERSION, 0) + header
    blob += TRAILER.pack(PREAMBLE.size, len(header), checksum(header), END_MAGIC)
    path = tmp_path / "h.nks"
    path.write_bytes(blob)
    with pytest.raises(CorruptFileError, match="out of range"):
        nkserde.load({"a": np.zeros(1)}, path)


def test_info(saved):
    meta = nkserde.info(saved)
    assert meta["format_version"] == nkserde.format.FORMAT_VERSION
    for key in (
        "nkserde",
        "netket",
        "jax",
        "flax",
        "numpy",
        "python",
        "created",
        "process_count",
        "root_type",
        "types",
    ):
        assert key in meta
    assert meta["process_count"] == 1
    assert meta["root_type"] == "dict"


def _frame(tmp_path, version, header: dict, payload: bytes = b"", name="f.nks"):
    """A file of format ``version`` around a hand-made header and payload
    (the payload starts at offset 64)."""
    import msgpack

    from nkserde.format.checksum import checksum
    from nkserde.format.layout import END_MAGIC, MAGIC

    head = PREAMBLE.pack(MAGIC, version, 0)
    body = head + bytes(64 - len(head)) + payload
    raw = msgpack.packb({"format_version": version, **header}, use_bin_type=True)
    path = tmp_path / name
    path.write_bytes(body + raw + TRAILER.pack(len(body), len(raw), checksum(raw), END_MAGIC))
    return path


def test_format_1_files_still_load(tmp_path):
    """Files written before block entries existed (format 1) load unchanged."""
    from nkserde.format.checksum import checksum

    data = np.arange(6, dtype=np.float64)
    entry = {
        "dtype": "float64",
        "shape": [2, 3],
        "offset": 64,
        "nbytes": 48,
        "stored": 48,
        "codec": "raw",
        "checksum": checksum(data.tobytes()),
    }
    path = _frame(tmp_path, 1, {"meta": {}, "tree": {"w": {"@array": 0}}, "arrays": [entry]}, data.tobytes())
    out = nkserde.load({"w": np.zeros((2, 3))}, path)
    np.testing.assert_array_equal(out["w"], data.reshape(2, 3))
    # block entries are a format-2 feature: a format-1 file with one is damaged
    blocked = {"dtype": "float64", "shape": [2, 3], "blocks": []}
    path = _frame(tmp_path, 1, {"meta": {}, "tree": {"w": {"@array": 0}}, "arrays": [blocked]})
    with pytest.raises(CorruptFileError, match="malformed index entry"):
        nkserde.load({"w": np.zeros((2, 3))}, path)


def _blocks_file(tmp_path, starts_shapes, shape=(4, 3)):
    """A format-2 file whose one array is given as blocks of arange data."""
    from nkserde.format.checksum import checksum

    full = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    payload, blocks = b"", []
    for start, bshape in starts_shapes:
        data = full[tuple(slice(s, s + n) for s, n in zip(start, bshape))].tobytes()
        payload += data + bytes(-len(data) % 64)
        blocks.append(
            {
                "start": list(start),
                "shape": list(bshape),
                "offset": 64 + len(payload) - len(data) - (-len(data) % 64),
                "stored": len(data),
                "codec": "raw",
                "checksum": checksum(data),
            }
        )
    entry = {"dtype": "int32", "shape": list(shape), "blocks": blocks}
    return full, _frame(tmp_path, 2, {"meta": {}, "tree": {"a": {"@array": 0}}, "arrays": [entry]}, payload)


def test_blocks_are_assembled_and_checked(tmp_path):
    full, path = _blocks_file(tmp_path, [((2, 0), (2, 3)), ((0, 0), (2, 2)), ((0, 2), (2, 1))])
    np.testing.assert_array_equal(nkserde.load({"a": np.zeros((4, 3), np.int32)}, path)["a"], full)
    for bad, why in [
        ([((0, 0), (2, 3)), ((1, 0), (3, 3))], "malformed block|overlap|fill"),
        ([((0, 0), (2, 3)), ((1, 0), (2, 3))], "overlap"),
        ([((0, 0), (2, 3))], "do not fill"),
    ]:
        _, path = _blocks_file(tmp_path, bad)
        with pytest.raises(CorruptFileError, match=why):
            nkserde.load({"a": np.zeros((4, 3), np.int32)}, path)
