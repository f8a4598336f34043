"""nkserde.checkpoint_files.directory.RunDirectory: one run's files."""

import numpy as np
import pytest

import nkserde
from nkserde.checkpoint.keep_policy import KeepLatest
from nkserde.checkpoint_files.directory import RunDirectory
from nkserde.errors import FileReadError


def _write(files: RunDirectory, step: int):
    nkserde.save({"step": np.int64(step)}, files.step_path(step))


def test_steps_paths_and_latest_skip_damaged(tmp_path):
    files = RunDirectory(tmp_path / "ckpt")
    files.create()
    for step in (2, 4, 6):
        _write(files, step)
    assert files.steps() == [2, 4, 6]
    assert files.step_path(4).name == "step-0000000004.nks"
    damaged = files.step_path(6)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    assert files.latest() == files.step_path(4)


def test_fingerprint_round_trip(tmp_path):
    files = RunDirectory(tmp_path)
    assert files.read_fingerprint() == {} and not files.has_history()
    files.write_fingerprint({"model": "RBM", "n": 8})
    assert files.read_fingerprint() == {"model": "RBM", "n": 8}
    assert files.has_history()


def test_move_aside_keeps_everything(tmp_path):
    files = RunDirectory(tmp_path)
    _write(files, 3)
    files.write_fingerprint({"a": 1})
    (tmp_path / "unrelated.txt").write_text("x")
    target = files.move_aside()
    assert files.steps() == [] and not files.has_history()
    assert sorted(p.name for p in target.iterdir()) == ["fingerprint.json", "step-0000000003.nks"]
    assert (tmp_path / "unrelated.txt").exists()


def test_retire_deletes_what_the_policy_does_not_keep(tmp_path):
    files = RunDirectory(tmp_path)
    for step in (1, 2, 3, 4):
        _write(files, step)
    assert files.retire(KeepLatest(2), newest=3) == [1]
    assert files.steps() == [2, 3, 4]


def test_a_fingerprint_that_is_not_a_file_is_refused_not_taken_as_absent(tmp_path):
    """A directory named fingerprint.json (a half-copied run, a mistake) is an
    error naming it, not a directory without a fingerprint: resume="auto"
    must not skip the same-script check because of it."""
    (tmp_path / "fingerprint.json").mkdir()
    files = RunDirectory(tmp_path)
    assert files.has_history()
    with pytest.raises(FileReadError, match="fingerprint.json"):
        files.read_fingerprint()
