"""nkserde.checkpoint.options: every option of a Checkpoint checked once,
in one place, every string option against one table, every error in one
shape; the plain forms as they always were."""

from __future__ import annotations

import datetime
import inspect
import signal
from pathlib import Path

import pytest

import nkserde
from nkserde.checkpoint.job.control import JobOptions
from nkserde.checkpoint.option_checks import CHOICES
from nkserde.checkpoint.options import CheckpointOptions, InitFrom


def test_the_checkpoint_and_its_options_have_the_same_defaults():
    # Checkpoint(...)'s signature is what help() and the API page show;
    # CheckpointOptions.parse is what checkpointed() checks its options with
    shown = inspect.signature(nkserde.Checkpoint).parameters
    parsed = inspect.signature(CheckpointOptions.parse).parameters
    assert [k for k in shown if k != "directory"] == list(parsed)
    assert {k: p.default for k, p in parsed.items()} == {k: shown[k].default for k in parsed}


def test_the_defaults():
    options = CheckpointOptions.parse()
    assert options.every == nkserde.EverySteps(50) and options.keep == nkserde.KeepLatest(3)
    assert (options.resume, options.on_write_error, options.async_save) == ("auto", "warn", True)
    assert options.job == JobOptions("auto", "auto", 0, (signal.SIGTERM, signal.SIGUSR1))
    assert options.init_from is None and options.compile_cache == "auto"


def test_the_plain_forms_become_policies():
    options = CheckpointOptions.parse(every=datetime.timedelta(minutes=15), keep=2, keep_every=100)
    assert options.every == nkserde.EveryDuration("15min")
    assert options.keep == nkserde.KeepLatest(2) | nkserde.KeepMultiples(100)
    auto = CheckpointOptions.parse(every="auto", budget=0.05, mtbf="24h").every
    assert auto == nkserde.WithinBudget(0.05, mtbf=86400)


def test_init_from_and_how():
    options = CheckpointOptions.parse(init_from="gs/ckpt", at="state", strict=0, rename={"a": "b"})
    assert options.init_from == InitFrom(Path("gs/ckpt"), "state", False, {"a": "b"})


@pytest.mark.parametrize("option", sorted(CHOICES))
def test_every_string_option_is_checked_by_the_one_table(option):
    for value in CHOICES[option]:
        CheckpointOptions.parse(**{option: value})
    listed = ", ".join(map(repr, CHOICES[option]))
    for bad in ("sometimes", None, 1):
        with pytest.raises(ValueError, match=f"^{option} must be one of {listed}, got {bad!r}$"):
            CheckpointOptions.parse(**{option: bad})


@pytest.mark.parametrize(
    "options, words",
    [
        ({"requeue_on_error": -1}, "requeue_on_error must be an int >= 0, got -1"),
        ({"requeue_on_error": True}, "requeue_on_error must be an int >= 0, got True"),
        ({"walltime": 0}, 'walltime must be "auto", None or a positive number of seconds, got 0'),
        ({"walltime": "1h"}, "walltime must be \"auto\", None or a positive number of seconds, got '1h'"),
        ({"keep": 0}, "keep must be a number of checkpoints >= 1 or a keep policy, got 0"),
        ({"keep_every": -2}, "keep_every must be an int >= 1 or None, got -2"),
        ({"budget": 1}, "budget must be a fraction of the run between 0 and 1, got 1"),
    ],
)
def test_every_error_has_one_shape(options, words):
    with pytest.raises(ValueError) as raised:
        CheckpointOptions.parse(**options)
    assert str(raised.value) == words


def test_the_checkpoint_checks_its_options_when_it_is_made(tmp_path):
    with pytest.raises(ValueError, match="^on_write_error must be one of 'warn', 'raise', got 'ignore'$"):
        nkserde.Checkpoint(tmp_path, on_write_error="ignore")
    with pytest.raises(ValueError, match="^requeue must be one of 'auto', 'never', got 'always'$"):
        nkserde.checkpointed(object(), tmp_path, requeue="always")
    assert not any(tmp_path.iterdir())  # nothing written by a refusal


def test_options_are_a_frozen_value():
    import dataclasses

    options = CheckpointOptions.parse()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.resume = "never"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.job.walltime = None
