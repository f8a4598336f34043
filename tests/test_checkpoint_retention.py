"""nkserde.checkpoint.keep_policy: which checkpoint steps stay (no files),
the policies alone, combined, and as Checkpoint(keep=..., keep_every=...)
takes them."""

import dataclasses

import pytest

import nkserde
from nkserde.checkpoint.keep_policy import KeepAny, KeepLatest, KeepMultiples, KeepPolicy, parse_keep


def test_keeps_the_newest():
    assert KeepLatest(2).kept([0, 5, 10, 15], newest=15) == [10, 15]
    assert KeepLatest(2).retired([0, 5, 10, 15], newest=15) == [0, 5]


def test_keep_every_keeps_multiples_besides_the_newest():
    policy = KeepLatest(1) | KeepMultiples(10)
    assert policy.kept([5, 10, 15, 20, 25], newest=25) == [10, 20, 25]
    assert policy.retired([5, 10, 15, 20, 25], newest=25) == [5, 15]


def test_steps_newer_than_the_verified_one_are_never_retired():
    # a newer file than the checkpoint just verified (e.g. one being written
    # by a later save) is not retention's to delete
    assert KeepLatest(1).retired([10, 20, 30], newest=20) == [10]
    assert KeepMultiples(7).retired([10, 20, 30], newest=20) == [10]


def test_the_newest_is_kept_whatever_the_policy():
    # multiples alone would retire step 25, the only checkpoint of the run's end
    assert KeepMultiples(10).kept([5, 10, 15, 20, 25], newest=25) == [10, 20, 25]


def test_fewer_steps_than_keep_retire_nothing():
    assert KeepLatest(3).retired([4, 8], newest=8) == []
    assert KeepLatest(3).retired([], newest=0) == []


def test_combined_policies_keep_what_any_keeps_and_are_flat_frozen_values():
    policy = KeepLatest(2) | KeepMultiples(10) | KeepMultiples(4)
    assert policy == KeepAny(KeepLatest(2), KeepMultiples(10), KeepMultiples(4))
    assert policy.kept([4, 5, 8, 10, 11, 12, 13], newest=13) == [4, 8, 10, 12, 13]
    assert isinstance(policy, KeepPolicy) and hash(policy) == hash(KeepAny(*policy.policies))
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.policies = ()
    assert str(KeepLatest(3) | KeepMultiples(1000)) == "the newest 3 and every multiple of 1000"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: KeepLatest(0), r"KeepLatest\(n\) must be an int >= 1, got 0"),
        (lambda: KeepLatest(-1), r"KeepLatest\(n\) must be an int >= 1, got -1"),
        (lambda: KeepMultiples(0), r"KeepMultiples\(k\) must be an int >= 1, got 0"),
        (lambda: KeepMultiples(True), r"KeepMultiples\(k\) must be an int >= 1, got True"),
        (lambda: KeepAny(KeepLatest(1), 3), r"KeepAny\(...\) must be keep policies .*, got 3"),
        (lambda: parse_keep(0), r"keep must be a number of checkpoints >= 1 or a keep policy, got 0"),
        (lambda: parse_keep("many"), r"keep must be a number .*, got 'many'"),
        (lambda: parse_keep(3, -1), r"keep_every must be an int >= 1 or None, got -1"),
    ],
)
def test_rejects_impossible_policies_in_one_shape(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_the_plain_options_are_the_policies_they_always_were():
    assert parse_keep(3) == KeepLatest(3)
    assert parse_keep(2.0) == KeepLatest(2)  # int(keep), as always
    assert parse_keep(2, 10) == KeepLatest(2) | KeepMultiples(10)
    assert parse_keep(KeepMultiples(5), 10) == KeepMultiples(5) | KeepMultiples(10)


def test_checkpoint_keep_every_0_keeps_no_extra_steps(tmp_path):
    # the keyword of earlier releases: keep_every=0 kept no multiples besides the newest
    with pytest.warns(FutureWarning, match="keep_every"):
        assert nkserde.Checkpoint(tmp_path, keep=2, keep_every=0).options.keep == KeepLatest(2)


def test_checkpoint_takes_a_keep_policy(tmp_path):
    policy = nkserde.KeepLatest(1) | nkserde.KeepMultiples(2)
    assert nkserde.Checkpoint(tmp_path, keep=policy).options.keep is policy


def test_retention_waits_for_the_newest_checkpoint_to_verify(tmp_path, monkeypatch):
    """The property test_a_failed_newest_retires_nothing_older names, on a
    run: the checkpoint of step 3 fails its verification, so with keep=1
    the checkpoint of step 2 stays on disk (the run goes on,
    on_write_error="warn"), while step 1 was retired once step 2 verified."""
    import warnings

    import builders

    from nkserde.loading import file_info
    from nkserde.errors import CorruptFileError

    verify_steps = file_info.verify_steps

    def failing_for_step_3(path):
        if path.name == "step-0000000003.nks":
            raise CorruptFileError(f"{path}: damaged (injected)")
        return (yield from verify_steps(path))

    monkeypatch.setattr(file_info, "verify_steps", failing_for_step_3)
    driver = nkserde.checkpointed(builders.vmc(), tmp_path, every=1, keep=1, async_save=False, on_write_error="warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        driver.run(3, out=(), show_progress=False)
    assert any("damaged (injected)" in str(w.message) for w in caught), [str(w.message) for w in caught]
    left = sorted(p.name for p in (tmp_path / "run-0").glob("step-*.nks"))
    assert "step-0000000002.nks" in left and "step-0000000001.nks" not in left, left
