"""The choice of codec depends on the bytes alone: a compressor reused by
its thread gives the frames a new one would, whatever it compressed before
and whatever other threads compress at the same time."""

from __future__ import annotations

import threading

import numpy as np
import zstandard

import nkserde
from nkserde.format import codecs
from nkserde.format.reader import read_index


def fresh_frame(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=codecs.LEVEL).compress(data)


def test_a_reused_compressor_gives_a_new_ones_frames():
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, n, size=s, dtype=np.int8).tobytes() for n, s in ((2, 3000), (100, 50), (2, 1 << 16))]
    for data in [*inputs, *inputs[::-1]]:
        assert codecs._compress(data) == fresh_frame(data)


def test_threads_compressing_at_once_get_their_own_frames():
    datas = [bytes([i]) * 5000 + bytes(range(256)) * i for i in range(8)]
    wrong = []

    def compress_many(data):
        for _ in range(200):
            if codecs._compress(data) != fresh_frame(data):
                wrong.append(data[:1])

    threads = [threading.Thread(target=compress_many, args=(d,)) for d in datas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_the_same_state_gives_the_same_arrays_on_disk(tmp_path):
    """Codec, stored size, place and checksum of every array (the header's
    creation time differs), with another save in between."""
    state = {"chains": np.where(np.arange(4096) % 3, 1, -1).astype(np.int8), "w": np.linspace(0, 1, 100)}
    nkserde.save(state, tmp_path / "a.nks")
    nkserde.save({"other": np.arange(10_000) % 7}, tmp_path / "other.nks")
    nkserde.save(state, tmp_path / "b.nks")
    (a, _), (b, _) = read_index(tmp_path / "a.nks"), read_index(tmp_path / "b.nks")
    assert [e["codec"] for e in a["arrays"]] == ["zstd", "zstd"]  # the compressor was used
    assert a["arrays"] == b["arrays"]
