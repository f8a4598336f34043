"""nkserde.checkpoint.keep_policy: which checkpoint steps stay (no files)."""

import pytest

from nkserde.checkpoint.keep_policy import Retention


def test_keeps_the_newest():
    assert Retention(keep=2).kept([0, 5, 10, 15], newest=15) == [10, 15]
    assert Retention(keep=2).retired([0, 5, 10, 15], newest=15) == [0, 5]


def test_keep_every_keeps_multiples_besides_the_newest():
    policy = Retention(keep=1, keep_every=10)
    assert policy.kept([5, 10, 15, 20, 25], newest=25) == [10, 20, 25]
    assert policy.retired([5, 10, 15, 20, 25], newest=25) == [5, 15]


def test_steps_newer_than_the_verified_one_are_never_retired():
    # a newer file than the checkpoint just verified (e.g. one being written
    # by a later save) is not retention's to delete
    assert Retention(keep=1).retired([10, 20, 30], newest=20) == [10]


def test_fewer_steps_than_keep_retire_nothing():
    assert Retention(keep=3).retired([4, 8], newest=8) == []
    assert Retention(keep=3).retired([], newest=0) == []


@pytest.mark.parametrize("keep, keep_every", [(0, None), (-1, None), (1, 0)])
def test_rejects_impossible_policies(keep, keep_every):
    with pytest.raises(ValueError):
        Retention(keep=keep, keep_every=keep_every)


def test_checkpoint_keep_every_0_keeps_no_extra_steps(tmp_path):
    import nkserde

    # keep_every=0 has always meant "no multiples kept besides the newest"
    assert nkserde.Checkpoint(tmp_path, keep=2, keep_every=0)._saver.keep == Retention(keep=2)


def test_retention_waits_for_the_newest_checkpoint_to_verify(tmp_path, monkeypatch):
    """The property test_a_failed_newest_retires_nothing_older names, on a
    run: the checkpoint of step 3 fails its verification, so with keep=1
    the checkpoint of step 2 stays on disk (the run goes on,
    on_write_error="warn"), while step 1 was retired once step 2 verified."""
    import warnings

    import builders

    import nkserde
    from nkserde import api
    from nkserde.errors import CorruptFileError

    verify_steps = api.verify_steps

    def failing_for_step_3(path):
        if path.name == "step-0000000003.nks":
            raise CorruptFileError(f"{path}: damaged (injected)")
        return (yield from verify_steps(path))

    monkeypatch.setattr(api, "verify_steps", failing_for_step_3)
    driver = nkserde.checkpointed(builders.vmc(), tmp_path, every=1, keep=1, async_save=False, on_write_error="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        driver.run(3, out=(), show_progress=False)
    assert any("damaged (injected)" in str(w.message) for w in caught), [str(w.message) for w in caught]
    left = sorted(p.name for p in (tmp_path / "run-0").glob("step-*.nks"))
    assert "step-0000000002.nks" in left and "step-0000000001.nks" not in left, left
