"""nkserde.checkpoint.persist.restore: which checkpoint a run resumes (files and
fingerprints only, no NetKet run)."""

import numpy as np
import pytest

import nkserde
from nkserde.checkpoint import fingerprint
from nkserde.checkpoint.persist.restore import choose_checkpoint
from nkserde.checkpoint_files.directory import RunDirectory
from nkserde.errors import NkserdeError, RunMismatchError

RUN = {"fingerprint_version": str(fingerprint.VERSION), "driver": "VMC", "n_samples": "512"}


def _files(tmp_path, steps=(), fp=RUN):
    files = RunDirectory(tmp_path)
    for step in steps:
        nkserde.save({"step": np.int64(step)}, files.step_path(step))
    if fp is not None:
        files.write_fingerprint(fp)
    return files


def _choose(files, resume="auto", current=RUN):
    try:
        return choose_checkpoint(files, resume, current, every=5)
    finally:
        files.lock.release()


def test_nothing_to_resume_writes_the_fingerprint(tmp_path):
    files = _files(tmp_path, fp=None)
    assert _choose(files) is None
    assert files.read_fingerprint() == RUN


def test_the_newest_that_verifies_is_chosen_with_its_state(tmp_path):
    files = _files(tmp_path, steps=(5, 10))
    newest = files.step_path(10)
    newest.write_bytes(newest.read_bytes()[:-3])  # truncated: a crash while copying
    with pytest.warns(UserWarning, match="skipping checkpoint .*step-0000000010"):
        path, state = _choose(files)
    assert path == files.step_path(5) and int(state["step"]) == 5


def test_a_changed_run_is_refused_naming_the_change_unless_forced(tmp_path):
    files = _files(tmp_path, steps=(5,))
    changed = {**RUN, "n_samples": "1024"}
    with pytest.raises(RunMismatchError) as refused:
        _choose(files, current=changed)
    assert refused.value.changes == ["n_samples: 512 -> 1024"] and refused.value.directory == tmp_path
    message = str(refused.value)
    assert str(files.fingerprint_path) in message and "\n  n_samples: 512 -> 1024\n" in message
    # the three ways on
    assert "the script that wrote them" in message and "resume='force'" in message and "resume='never'" in message
    path, _ = _choose(files, resume="force", current=changed)
    assert path == files.step_path(5)
    assert files.read_fingerprint() == changed  # the forced run is the run now


def test_never_moves_old_checkpoints_aside(tmp_path):
    files = _files(tmp_path, steps=(5,))
    assert _choose(files, resume="never") is None
    assert files.steps() == []
    (previous,) = tmp_path.glob("previous-*")
    assert (previous / "step-0000000005.nks").exists()


def test_must_fails_without_a_checkpoint_that_verifies(tmp_path):
    files = _files(tmp_path, steps=(5,))
    files.step_path(5).write_bytes(b"not a checkpoint")
    with pytest.raises(NkserdeError, match="nothing to resume"), pytest.warns(UserWarning):
        _choose(files, resume="must")


def test_a_run_takes_the_lock_before_it_chooses(tmp_path):
    """The resume takes the directory's lock before it reads anything: a
    run on a directory another run holds is refused for that, not for its
    fingerprint (which differs here) or its checkpoints."""
    import builders as B

    files = _files(tmp_path, steps=(5,))
    files.lock.acquire()  # another run of this process holds it
    try:
        with pytest.raises(NkserdeError, match="already running"):
            B.vmc().run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=5))
        assert files.lock.held and files.read_fingerprint() == RUN
    finally:
        files.lock.release()


def test_a_damaged_fingerprint_is_refused_naming_it_unless_forced(tmp_path):
    files = _files(tmp_path, steps=(5,))
    files.fingerprint_path.write_text('{"driver": "VMC", "n_sam')  # a torn copy
    with pytest.raises(NkserdeError, match="fingerprint.json: the run fingerprint is not valid JSON.*resume='force'"):
        _choose(files)
    path, _ = _choose(files, resume="force")
    assert path == files.step_path(5)
    assert files.read_fingerprint() == RUN  # written anew


def test_a_version_2_fingerprint_is_compared_and_replaced_by_todays(tmp_path):
    """fingerprint.json files of version 2 are on users' disks: compared
    (a change is still refused), and written anew at today's version once
    the run resumes."""
    version_2 = {**RUN, "fingerprint_version": "2"}
    files = _files(tmp_path, steps=(5,), fp={**version_2, "n_samples": "256"})
    with pytest.raises(RunMismatchError, match="n_samples: 256 -> 512"):
        _choose(files)
    files.write_fingerprint(version_2)
    path, _ = _choose(files)
    assert path == files.step_path(5)
    assert files.read_fingerprint() == RUN


def test_a_fingerprint_without_a_version_is_not_compared_and_replaced(tmp_path):
    """nkserde's first fingerprints (no version, reprs) are not compared."""
    files = _files(tmp_path, steps=(5,), fp={"driver": "VMC", "n_samples": "256"})
    path, _ = _choose(files)
    assert path == files.step_path(5) and files.read_fingerprint() == RUN


def test_a_resume_ls_and_load_agree_on_a_checkpoint_over_the_load_limit(tmp_path):
    # the newest checkpoint reads cleanly but holds more than this process
    # may load: a resume skips it, so ls must not mark it and nkserde.load of
    # the directory must take the same older one
    from nkserde.cli.listing import listing

    files = RunDirectory(tmp_path)
    nkserde.save({"step": np.int64(5), "x": np.zeros(8)}, files.step_path(5))
    nkserde.save({"step": np.int64(10), "x": np.zeros(1 << 16)}, files.step_path(10))
    files.write_fingerprint(RUN)
    nkserde.set_load_limits(max_load_bytes=1 << 12)
    try:
        with pytest.warns(UserWarning, match=r"skipping checkpoint .*step-0000000010.*limit"):
            path, _ = _choose(files)
        (run,) = listing(tmp_path)
        with pytest.warns(UserWarning, match=r"skipping checkpoint .*step-0000000010"):
            loaded = nkserde.load({"step": np.int64(0), "x": np.zeros(8)}, tmp_path)
    finally:
        nkserde.set_load_limits()  # back to the environment's or default limits
    assert path == files.step_path(5)
    assert run["resume"] == path.name
    assert [c["resume"] for c in run["checkpoints"]] == [True, False]
    assert "limit" in run["checkpoints"][1]["problem"]
    assert int(loaded["step"]) == 5
