"""When a run checkpoints (nkserde.checkpoint.save_policy): every N steps, every
so much wall-clock time, or within a budget of the run; on a fake clock
here, and in NetKet runs where the outcome does not depend on the machine's
speed. Several processes agreeing on the steps: tests/test_distributed.py."""

from __future__ import annotations

import dataclasses
import datetime
import math

import pytest

import builders as B
import nkserde
from nkserde.checkpoint.option_checks import format_duration, parse_duration
from nkserde.checkpoint.save_policy import (
    EveryDuration,
    EverySteps,
    SaveAny,
    SaveSchedule,
    WithinBudget,
    parse_every,
)
from nkserde.checkpoint.step_times import StepTimes


@pytest.mark.parametrize(
    "text, seconds", [("90s", 90), ("15min", 900), ("2h", 7200), ("1.5 min", 90), (datetime.timedelta(hours=1), 3600)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["15", "soon", "-3min", "0s", "10 parsecs"])
def test_a_duration_that_is_not_one_says_how_to_write_it(bad):
    with pytest.raises(ValueError, match=r"'90s', '15min' or '2h'|must be positive"):
        parse_duration(bad)


@pytest.mark.parametrize(
    "seconds, words",
    [
        (None, "?"),
        (-3.0, "0 s"),
        (1.5, "1.5 s"),
        (90.0, "90 s"),
        (65.4, "65.4 s"),
        (900.0, "15 min"),
        (7200.0, "2 h"),
        (86400.0, "24 h"),
        (7188.0, "01:59:48"),
        (2.5 * 86400 + 1, "2.5 days"),
    ],
)
def test_one_formatter_says_every_duration(seconds, words):
    # the interval of `every` and a SLURM job's time left, in the same words
    assert format_duration(seconds) == words


def test_every_is_steps_a_duration_or_auto():
    assert parse_every(50) == EverySteps(50) and parse_every(50).steps == 50
    assert parse_every("15min") == EveryDuration(900) == EveryDuration(datetime.timedelta(minutes=15))
    auto = parse_every("auto", budget=0.02, mtbf="1h")
    assert auto == WithinBudget(0.02, mtbf=3600) and (auto.budget, auto.mtbf) == (0.02, 3600)
    expected = "every must be a number of steps >= 1, a duration .*, 'auto' or a save policy, got "
    for bad in (0, True, "often"):
        with pytest.raises(ValueError, match=expected + repr(bad)):
            parse_every(bad)
    with pytest.raises(ValueError, match="budget must be a fraction of the run between 0 and 1, got 2"):
        parse_every("auto", budget=2)
    with pytest.raises(ValueError, match="budget must be a fraction"):
        parse_every(50, budget=2)  # checked whatever every is, as always


def test_a_policy_is_taken_as_it_is_and_budget_goes_with_it():
    policy = EverySteps(10) | EveryDuration("1h")
    assert parse_every(policy) is policy
    with pytest.raises(ValueError, match=r"budget, mtbf must be left out when every is a policy"):
        parse_every(policy, budget=0.05)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: EverySteps(0), r"EverySteps\(steps\) must be an int >= 1, got 0"),
        (lambda: EverySteps(2.5), r"EverySteps\(steps\) must be an int >= 1, got 2.5"),
        (lambda: EveryDuration("soon"), r"'soon' is not a duration"),
        (lambda: WithinBudget(1.5), r"budget must be a fraction of the run between 0 and 1, got 1.5"),
        (lambda: SaveAny(EverySteps(1), "15min"), r"SaveAny\(...\) must be save policies .*, got '15min'"),
        (lambda: SaveAny(), r"SaveAny\(...\) must be at least one of save policies"),
    ],
)
def test_an_impossible_policy_is_refused_when_made(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_policies_are_frozen_values_that_combine():
    combined = EverySteps(100) | EveryDuration("15min") | WithinBudget(0.05)
    assert combined == SaveAny(EverySteps(100), EveryDuration(900), WithinBudget(0.05))  # flat
    assert hash(combined) == hash(SaveAny(*combined.policies))
    with pytest.raises(dataclasses.FrozenInstanceError):
        combined.policies = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        EverySteps(3).steps = 4
    assert str(EverySteps(100) | EveryDuration("15min")) == "every 100 steps or every 15 min"


def test_any_saves_whenever_one_would_and_names_the_earliest_next_step():
    schedule = SaveSchedule(EverySteps(10) | EveryDuration("10s"), StepTimes())
    schedule.started(0.0)
    assert not schedule.policy.in_steps and EverySteps(2).in_steps and (EverySteps(2) | EverySteps(3)).in_steps
    assert schedule.due(10, 1.0)  # the steps
    assert not schedule.due(3, 9.0) and schedule.due(3, 10.0)  # the time
    schedule.taken(10.0)  # any checkpoint starts the interval again
    assert not schedule.due(4, 19.0)
    for t in (0.0, 1.0, 2.0):  # steps of 1 s: 10 s is 10 steps, as is the next multiple of 10
        schedule.steps.started(t)
    assert schedule.next_step(3) == 10 and schedule.next_step(5) == 10
    nothing_measured = SaveSchedule(EverySteps(10) | EveryDuration("4s"), StepTimes())
    assert nothing_measured.next_step(3) == 4  # the next step
    assert schedule.interval() == 10.0


def test_checkpoint_takes_a_save_policy_and_says_it(tmp_path, caplog):
    import logging

    every = nkserde.EverySteps(3) | nkserde.EveryDuration("1h")
    ckpt = nkserde.Checkpoint(tmp_path, every=every, keep=100)
    with caplog.at_level(logging.INFO, logger="nkserde"):
        B.vmc().run(7, out=None, show_progress=False, callback=ckpt)
    assert ckpt.options.every is every
    assert ckpt.steps() == [3, 6, 7]  # the multiples of 3 (an hour never passed) and the end
    assert "a checkpoint every 3 steps or every 1 h" in caplog.text


def test_steps_as_always():
    schedule = SaveSchedule(parse_every(3), StepTimes())
    assert [c for c in range(10) if schedule.due(c, 0.0)] == [0, 3, 6, 9]
    assert schedule.next_step(6) == 9


def test_a_duration_counts_from_the_previous_checkpoint():
    schedule = SaveSchedule(parse_every("10s"), StepTimes())
    schedule.started(100.0)
    assert not schedule.due(1, 109.9) and schedule.due(1, 110.0)
    schedule.taken(110.0)
    assert not schedule.due(2, 119.0) and schedule.due(3, 120.5)
    for t in (0.0, 2.0, 4.0, 6.0):  # steps of 2 s
        schedule.steps.started(t)
    assert schedule.next_step(3) == 3 + 5  # 10 s of 2-s steps


def test_auto_keeps_checkpointing_within_the_budget():
    """Checkpoints of 0.5 s at 1%: the run pays for each before the next
    (the first, which measures one, after the first step), then one every
    50 s; at every checkpoint, they all took at most 1% of the run."""
    schedule = SaveSchedule(parse_every("auto", budget=0.01), StepTimes())
    schedule.started(0.0)
    assert schedule.due(1, 0.1)  # nothing measured: the first step's checkpoint measures one
    schedule.taken(1.0)
    schedule.saved(0.5)
    assert schedule.interval() == pytest.approx(99.0)  # 1 s (two checkpoints) is 1% of 100 s
    assert not schedule.due(2, 99.9) and schedule.due(2, 100.0)
    schedule.taken(100.0)
    schedule.saved(0.5)
    assert schedule.interval() == pytest.approx(50.0)  # 0.5 s is 1% of 50 s
    assert not schedule.due(3, 149.9) and schedule.due(3, 150.0)
    assert schedule.spent == 1.0  # 1% of the 100 s at the checkpoint before


def test_auto_counts_a_background_write_once_at_its_price():
    """Its snapshot's share is counted when it is taken, then its price
    (which includes it) when it ends: 40 ms in all, not 42."""
    schedule = SaveSchedule(parse_every("auto", budget=0.01), StepTimes())
    schedule.started(0.0)
    now = 0.0
    for _ in range(20):
        schedule.steps.started(now)
        now += 0.010
    schedule.taken(now)
    schedule.saved(0.002)
    schedule.write_started(now, completed=20)
    assert schedule.spent == 0.002
    schedule.write_ended(now + 20 * 0.012, completed=40, own_seconds=0.005)
    assert schedule.spent == pytest.approx(0.040) and schedule.longest_save == pytest.approx(0.040)


def test_auto_prices_a_background_write_at_the_steps_it_slowed_down():
    """On a GPU or TPU a checkpoint's copies to the host slow the steps
    they go on across, which neither the snapshot nor the write's thread
    shows: steps of 10 ms, then 20 of 12 ms while a write was in flight,
    cost the run 40 ms, more than its own 5 ms."""
    schedule = SaveSchedule(parse_every("auto", budget=0.01), StepTimes())
    now = 0.0
    for _ in range(20):
        schedule.steps.started(now)
        now += 0.010
    schedule.write_started(now, completed=20)
    now += 20 * 0.012
    schedule.write_ended(now, completed=40, own_seconds=0.005)
    assert schedule.interval() == pytest.approx(0.040 / 0.01)
    schedule.write_started(now, completed=40)
    schedule.write_ended(now + 0.5, completed=90, own_seconds=0.030)  # steps no slower: its own time
    assert schedule.longest_save == pytest.approx(0.040)
    fresh = SaveSchedule(parse_every("auto", budget=0.01), StepTimes())
    fresh.write_started(0.0, completed=0)
    fresh.write_ended(1.0, completed=1, own_seconds=0.2)  # no step measured before it: its own time
    assert fresh.longest_save == pytest.approx(0.2)


def test_auto_with_a_failure_rate_is_at_least_youngs_interval():
    schedule = SaveSchedule(parse_every("auto", budget=0.5, mtbf="10h"), StepTimes())
    schedule.saved(2.0)
    assert schedule.interval() == pytest.approx(math.sqrt(2 * 2.0 * 36000))  # > 2 / 0.5


def test_a_checkpoint_every_hour_in_a_short_run_is_the_last_one_only(tmp_path):
    ckpt = nkserde.Checkpoint(tmp_path, every="1h", keep=100)
    B.vmc().run(6, out=None, show_progress=False, callback=ckpt)
    assert ckpt.steps() == [6]


def test_auto_checkpoints_the_first_step_to_measure_one(tmp_path, caplog):
    import logging

    ckpt = nkserde.Checkpoint(tmp_path, every="auto", keep=100)
    with caplog.at_level(logging.INFO, logger="nkserde"):
        B.vmc().run(4, out=None, show_progress=False, callback=ckpt)
    assert ckpt.steps()[0] == 1 and ckpt.steps()[-1] == 4
    assert "a checkpoint as often as keeps checkpointing within 1% of the run" in caplog.text


def test_the_options_are_checked_when_the_checkpoint_is_made(tmp_path):
    with pytest.raises(ValueError, match="every must be a number of steps >= 1, a duration .*, got 'sometimes'"):
        nkserde.Checkpoint(tmp_path, every="sometimes")
    with pytest.raises(ValueError, match="budget must be a fraction"):
        nkserde.checkpointed(B.vmc(), tmp_path, every=nkserde.WithinBudget(0))
