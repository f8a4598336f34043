"""Large raw arrays are checksummed in a second thread while they are
written: the file must be byte for byte the one the serial path writes."""

from __future__ import annotations

import numpy as np
import pytest

from nkserde import format as fileformat
from nkserde.format import writer
from nkserde.format.checksum import checksum


def _tree():
    rng = np.random.default_rng(3)
    return {"big": rng.normal(size=(3 << 20) // 2), "small": rng.normal(size=100), "step": 7}


def test_overlapped_checksum_writes_the_same_bytes(tmp_path, monkeypatch):
    tree, meta = _tree(), {"created": "fixed"}
    assert tree["big"].nbytes >= writer.PARALLEL_CHECKSUM
    parallel = fileformat.write_file(tmp_path / "parallel.nks", tree, meta)
    monkeypatch.setattr(writer, "PARALLEL_CHECKSUM", 1 << 62)
    serial = fileformat.write_file(tmp_path / "serial.nks", tree, meta)
    assert parallel.read_bytes() == serial.read_bytes()
    header, loaded = fileformat.read_file(parallel)
    assert header["arrays"][0]["codec"] == "raw"
    assert header["arrays"][0]["checksum"] == checksum(tree["big"].tobytes())
    assert (loaded["big"] == tree["big"]).all()


def test_an_error_in_the_checksum_thread_fails_the_save(tmp_path, monkeypatch):
    def broken(data):
        raise MemoryError("no memory for the checksum")

    monkeypatch.setattr(writer, "checksum", broken)
    with pytest.raises(MemoryError):
        fileformat.write_file(tmp_path / "x.nks", _tree(), {})
    assert not (tmp_path / "x.nks").exists()
    with pytest.raises(FileNotFoundError):
        fileformat.read_file(tmp_path / "x.nks")
