"""Atomic writes: a crash never damages the file at the target; stale
temporary files of dead processes are removed by the next save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nkserde
from nkserde.format.atomic import TEMP_MARK, remove_stale_temps

_CRASHING_SAVE = textwrap.dedent("""
    import sys, time, numpy as np
    import nkserde.format.codecs as codecs
    from nkserde.format import write_file
    real = codecs.choose_codec
    calls = []
    def slow(data):
        calls.append(1)
        if len(calls) == 2:          # first array written, second pending
            print("writing", flush=True)
            time.sleep(60)
        return real(data)
    codecs.choose_codec = slow
    import nkserde.format.array_write as w
    w.codecs.choose_codec = slow
    write_file(sys.argv[1], {"a": np.full(1000, 2.0), "b": np.full(1000, 3.0)}, {})
""")


def _temps(directory):
    return [p for p in directory.iterdir() if p.name.endswith(TEMP_MARK)]


def test_kill_during_save_keeps_previous_file(tmp_path):
    target = tmp_path / "ckpt.nks"
    nkserde.save({"a": np.full(1000, 1.0), "b": np.full(1000, 1.0)}, target)
    before = target.read_bytes()

    proc = subprocess.Popen([sys.executable, "-c", _CRASHING_SAVE, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        assert len(_temps(tmp_path)) == 1  # the partial temp file exists...
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    # ...the target is untouched and still loads
    assert target.read_bytes() == before
    out = nkserde.load({"a": np.zeros(1000), "b": np.zeros(1000)}, target)
    assert out["a"][0] == 1.0

    # the next save to the directory removes the dead process's temp file
    nkserde.save({"a": np.full(1000, 4.0), "b": np.full(1000, 4.0)}, tmp_path / "other.nks")
    assert _temps(tmp_path) == []
    assert nkserde.load({"a": np.zeros(1000), "b": np.zeros(1000)}, target)["a"][0] == 1.0


def test_live_processes_temps_are_kept(tmp_path):
    import socket

    live = tmp_path / f".x.nks~{socket.gethostname()}~{os.getppid()}{TEMP_MARK}"
    other_host = tmp_path / f".x.nks~some-other-host~1{TEMP_MARK}"
    live.write_bytes(b"partial")
    other_host.write_bytes(b"partial")
    assert remove_stale_temps(tmp_path) == []
    assert live.exists() and other_host.exists()


def test_failed_save_leaves_no_temp_and_no_target(tmp_path, monkeypatch):
    """The save fails in the middle of writing its arrays, once its
    temporary file exists: neither that file nor the target is left."""
    from nkserde.format import writer

    real, seen = writer.stream_array_steps, []

    def failing_on_the_second(f, array, position, digest=None):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        if len(seen) == 2:
            raise OSError(5, "Input/output error")
        return (yield from real(f, array, position, digest))

    monkeypatch.setattr(writer, "stream_array_steps", failing_on_the_second)
    target = tmp_path / "t.nks"
    with pytest.raises(nkserde.errors.FileWriteError, match="Input/output error"):
        nkserde.save({"a": np.ones(3), "b": np.zeros(4)}, target)
    assert len(seen) == 2 and any(name.startswith(".t.nks") for name in seen[1])  # the temporary file existed
    assert list(tmp_path.iterdir()) == []


def test_save_replaces_existing_file(tmp_path):
    target = tmp_path / "t.nks"
    nkserde.save({"a": np.ones(3)}, target)
    nkserde.save({"a": np.full(3, 7.0)}, target)
    assert nkserde.load({"a": np.zeros(3)}, target)["a"].tolist() == [7.0, 7.0, 7.0]
    assert [p.name for p in tmp_path.iterdir()] == ["t.nks"]
