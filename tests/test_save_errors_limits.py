"""Bad input on the save side, and the ceilings of a load: unstorable
values and colliding keys are an nkserde error naming the path at save
time; a file that declares huge arrays, a lying zstd frame or a huge header
is refused before anything is allocated."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard

import nkserde
from builders import rewrite_header
from nkserde.errors import CorruptFileError, LoadLimitError, UnregisteredTypeError
from nkserde.format.checksum import checksum
from nkserde.format.layout import TRAILER


@pytest.mark.parametrize(
    "value",
    [
        np.array(["x"]),
        np.array(["2020-01-01"], dtype="datetime64[D]"),
        np.array([1, "a"], dtype=object),
        np.zeros(2, "V4"),
        np.zeros(2, [("a", "<i4")]),
        np.timedelta64(3, "s"),
        np.str_("x"),
    ],
)
def test_unstorable_dtype_names_the_path(tmp_path, value):
    target = tmp_path / "t.nks"
    with pytest.raises(UnregisteredTypeError, match=r"^x/a/1: arrays of .* cannot be stored"):
        nkserde.save({"x": {"a": [0, value]}}, target)
    assert list(tmp_path.iterdir()) == []


def test_colliding_keys_are_refused(tmp_path):
    with pytest.raises(UnregisteredTypeError, match=r"^d: dict keys 1 and '1' are both stored as '1'"):
        nkserde.save({"d": {1: np.ones(2), "1": np.zeros(2)}}, tmp_path / "t.nks")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tree, where", [({"a": {"\ud800": 1}}, "a"), ({"a": ["ok", "\udc00"]}, "a/1")])
def test_text_that_cannot_round_trip_is_refused(tmp_path, tree, where):
    with pytest.raises(UnregisteredTypeError, match=rf"^{where}: .*lone surrogate"):
        nkserde.save(tree, tmp_path / "t.nks")


def test_state_dict_saves_check_keys_and_values(tmp_path):
    # save_state_dict takes a state dict as is: the file layer checks too
    with pytest.raises(UnregisteredTypeError, match=r"^<root>: dict key 1 is not a str"):
        nkserde.save_state_dict({1: 2}, tmp_path / "t.nks")
    with pytest.raises(UnregisteredTypeError, match=r"^a/b: cannot store a value of type object"):
        nkserde.save_state_dict({"a": {"b": object()}}, tmp_path / "t.nks")


def test_int_keys_still_round_trip_through_a_template(tmp_path):
    tree = {0: np.arange(3), 10: np.ones(2)}
    nkserde.save(tree, tmp_path / "t.nks")
    out = nkserde.load({0: np.zeros(3, np.int64), 10: np.zeros(2)}, tmp_path / "t.nks")
    assert sorted(out) == [0, 10] and out[0].tolist() == [0, 1, 2]


# --------------------------------------------------------------------------- limits of a load


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "s.nks"
    nkserde.save({"z": np.zeros(4096, np.int8), "r": np.arange(10.0)}, path)
    assert nkserde.format.read_header(path)["arrays"][0]["codec"] == "zstd"
    return path


def _loads(path):
    with pytest.raises(CorruptFileError, match=str(path)) as raised:
        nkserde.load_state_dict(path)
    with pytest.raises(CorruptFileError, match=str(path)):
        nkserde.load({"z": np.zeros(4096, np.int8), "r": np.zeros(10)}, path)
    return str(raised.value)


@pytest.mark.parametrize("shape", [[10**6, 10**6], [10**5, 10**5], [20_000, 20_000]])
def test_huge_declared_zstd_array_is_refused_before_allocating(small, shape):
    def change(h):
        h["arrays"][0].update(shape=shape, nbytes=shape[0] * shape[1])

    rewrite_header(small, change)
    message = _loads(small)
    assert "array 0" in message and "cannot come from a zstd frame" in message


def test_zstd_frame_whose_content_size_lies(small):
    # a frame that really holds 8192 zeros, declared as 4096 by the index
    frame = zstandard.ZstdCompressor(level=1).compress(bytes(8192))
    data = bytearray(small.read_bytes())
    entry = nkserde.format.read_header(small)["arrays"][0]
    assert len(frame) <= entry["stored"]
    data[entry["offset"] : entry["offset"] + len(frame)] = frame
    small.write_bytes(bytes(data))
    rewrite_header(small, lambda h: h["arrays"][0].update(stored=len(frame), checksum=checksum(frame)))
    assert "the zstd frame declares 8192 bytes, the index 4096" in _loads(small)


def test_zstd_frame_without_size_cannot_expand_beyond_the_index(small):
    # 1 MiB of zeros in a frame that declares no size, indexed as 4096
    # bytes: the decompressor stops at the declared size
    frame = zstandard.ZstdCompressor(level=1, write_content_size=False).compress(bytes(1 << 20))
    data = small.read_bytes()
    offset, length, digest, end = TRAILER.unpack(data[-TRAILER.size :])
    start = -(-offset // 64) * 64
    header_at = start + len(frame)
    raw = data[offset : offset + length]
    small.write_bytes(
        data[:offset] + bytes(start - offset) + frame + raw + TRAILER.pack(header_at, length, digest, end)
    )
    rewrite_header(small, lambda h: h["arrays"][0].update(offset=start, stored=len(frame), checksum=checksum(frame)))
    assert "does not decompress to 4096 bytes" in _loads(small)


def test_load_ceiling_is_configurable(small, monkeypatch):
    nkserde.set_load_limits(max_load_bytes=1000)
    try:
        with pytest.raises(LoadLimitError, match=r"decode to 4176 bytes, more than the limit of 1000"):
            nkserde.load_state_dict(small)
        # what verifies is what loads (a resume's choice, `nkserde ls` and a
        # load agree): the same refusal, before any array is read
        with pytest.raises(LoadLimitError, match=r"decode to 4176 bytes, more than the limit of 1000"):
            nkserde.verify(small)
    finally:
        nkserde.set_load_limits()  # back to the environment and the defaults
    assert nkserde.load_state_dict(small)["z"].nbytes == 4096
    monkeypatch.setenv("NKSERDE_MAX_LOAD_BYTES", "4000")
    with pytest.raises(LoadLimitError, match="NKSERDE_MAX_LOAD_BYTES"):
        nkserde.load_state_dict(small)
    monkeypatch.setenv("NKSERDE_MAX_LOAD_BYTES", "5000")
    nkserde.load_state_dict(small)


def test_header_ceiling(small, monkeypatch):
    monkeypatch.setenv("NKSERDE_MAX_HEADER_BYTES", "100")
    with pytest.raises(LoadLimitError, match=r"header of \d+ bytes is larger than the limit of 100"):
        nkserde.info(small)
    with pytest.raises(LoadLimitError):
        nkserde.load_state_dict(small)


def test_many_blocks_are_checked_quickly(small):
    # 20000 one-element blocks of a blocked array: no pairwise comparison
    n = 20_000

    def change(h):
        raw = h["arrays"][1]
        h["format_version"] = 2
        blocks = [
            {"start": [k], "shape": [1], "offset": raw["offset"], "stored": 8, "codec": "raw", "checksum": 0}
            for k in range(n)
        ]
        blocks[-1]["start"] = [0]  # overlaps the first
        h["arrays"][1] = {"dtype": "float64", "shape": [n], "blocks": blocks}

    rewrite_header(small, change)
    assert "blocks overlap" in _loads(small)


def test_array_at_a_time_reads_are_bounded(small):
    from nkserde.format.reader import read_arrays

    nkserde.set_load_limits(max_load_bytes=1000)
    try:
        with pytest.raises(LoadLimitError, match="array 0 decodes to 4096 bytes"):
            list(read_arrays(small))
        assert [i for i, _ in read_arrays(small, [1])] == [1]  # 80 bytes: within the limit
    finally:
        nkserde.set_load_limits()


def test_lazy_loads_count_what_they_read(small):
    """A load with a template and nkserde.open read arrays one by one; the
    ceiling counts the bytes they decode."""
    template = {"z": np.ones(4096, np.int8), "r": np.ones(10)}
    nkserde.set_load_limits(max_load_bytes=1000)
    try:
        with pytest.raises(LoadLimitError, match=r"array \d would bring this load to 4\d+ bytes, more than"):
            nkserde.load(template, small)
        with nkserde.open(small) as f:
            assert f.read("r").nbytes == 80  # within the limit
            with pytest.raises(LoadLimitError, match=r"array \d would bring this load to 4176 bytes"):
                f.read("z")
    finally:
        nkserde.set_load_limits()
    assert nkserde.load(template, small)["z"].nbytes == 4096
