"""Large raw arrays are checksummed in a second thread while they are
written: the file must be byte for byte the one the serial path writes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from nkserde import format as fileformat
from nkserde.format import array_write
from nkserde.format.checksum import checksum


def _tree():
    rng = np.random.default_rng(3)
    return {"big": rng.normal(size=(3 << 20) // 2), "small": rng.normal(size=100), "step": 7}


def test_overlapped_checksum_writes_the_same_bytes(tmp_path, monkeypatch):
    tree, meta = _tree(), {"created": "fixed"}
    assert tree["big"].nbytes >= array_write.PARALLEL_CHECKSUM
    parallel = fileformat.write_file(tmp_path / "parallel.nks", tree, meta)
    monkeypatch.setattr(array_write, "PARALLEL_CHECKSUM", 1 << 62)
    serial = fileformat.write_file(tmp_path / "serial.nks", tree, meta)
    assert parallel.read_bytes() == serial.read_bytes()
    header, loaded = fileformat.read_file(parallel)
    assert header["arrays"][0]["codec"] == "raw"
    assert header["arrays"][0]["checksum"] == checksum(tree["big"].tobytes())
    assert (loaded["big"] == tree["big"]).all()


def test_an_error_in_the_checksum_thread_fails_the_save(tmp_path, monkeypatch):
    """The checksum fails on the checksum thread only (the main thread's
    checksums of the small array and the header succeed): the save must
    still fail, with that thread's error, and publish nothing."""
    real, failed_on = array_write.checksum, []

    def broken_on_its_thread(data):
        if threading.current_thread().name == "nkserde-checksum":
            failed_on.append(threading.current_thread().name)
            raise MemoryError("no memory for the checksum")
        return real(data)

    monkeypatch.setattr(array_write, "checksum", broken_on_its_thread)
    with pytest.raises(MemoryError, match="no memory for the checksum"):
        fileformat.write_file(tmp_path / "x.nks", _tree(), {})
    assert failed_on == ["nkserde-checksum"]
    assert not (tmp_path / "x.nks").exists()
    with pytest.raises(FileNotFoundError):
        fileformat.read_file(tmp_path / "x.nks")
