"""nkserde.checkpoint.options: every option of a Checkpoint declared once
and checked once, every string option against one table, every error in
one shape; the plain forms as policies; the keywords of earlier releases
still working, each with a warning that writes its new spelling."""

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


def test_the_checkpoint_shows_the_options_of_their_one_declaration():
    # Checkpoint(...)'s and checkpointed(...)'s signatures are what help()
    # and the API page show: CheckpointOptions's fields, at most ten
    fields = CheckpointOptions.__dataclass_fields__
    assert len(fields) <= 10
    for call, leading in ((nkserde.Checkpoint, ["directory"]), (nkserde.checkpointed, ["driver", "directory"])):
        shown = inspect.signature(call).parameters
        assert list(shown) == leading + list(fields)
        assert {k: shown[k].default for k in fields} == {
            k: p.default for k, p in inspect.signature(CheckpointOptions).parameters.items()
        }


def test_the_checkpoint_docstring_describes_each_option_once():
    # help(nkserde.Checkpoint) lists every option with what it means, in
    # place of "**options" (on Python 3.13, which stores docstrings
    # dedented, as on earlier versions)
    doc = nkserde.Checkpoint.__doc__
    assert "**options" not in doc
    for name in CheckpointOptions.__dataclass_fields__:
        assert doc.count(f"\n  {name}: ") == 1, name


def test_the_defaults():
    options = CheckpointOptions()
    assert options.every == nkserde.EverySteps(50) and options.keep == nkserde.KeepLatest(3)
    assert (options.resume, options.on_write_error, options.async_save) == ("auto", "warn", True)
    assert options.job == JobOptions("auto", "auto", 0, (signal.SIGTERM, signal.SIGUSR1))
    assert options.init_from is None and options.compile_cache == "auto"


def test_the_plain_forms_become_policies():
    options = CheckpointOptions(every=datetime.timedelta(minutes=15), keep=2, init_from="gs/ckpt")
    assert options.every == nkserde.EveryDuration("15min")
    assert options.keep == nkserde.KeepLatest(2)
    assert CheckpointOptions(every="auto").every == nkserde.WithinBudget()
    assert options.init_from == InitFrom(Path("gs/ckpt"))


@pytest.mark.parametrize(
    "former, now, spelling",
    [
        ({"budget": 0.05, "mtbf": "24h", "every": "auto"}, {"every": nkserde.WithinBudget(0.05, mtbf=86400)},
         "every=nkserde.WithinBudget(budget=0.05, mtbf='24h')"),
        ({"keep": 2, "keep_every": 100}, {"keep": nkserde.KeepLatest(2) | nkserde.KeepMultiples(100)},
         "keep=nkserde.KeepLatest(2) | nkserde.KeepMultiples(100)"),
        ({"walltime": 3600, "requeue_on_error": 2}, {"job": nkserde.JobOptions(walltime=3600, requeue_on_error=2)},
         "job=nkserde.JobOptions(walltime=3600, requeue_on_error=2)"),
        ({"init_from": "gs/ckpt", "at": "state", "strict": 0, "rename": {"a": "b"}},
         {"init_from": nkserde.InitFrom("gs/ckpt", at="state", strict=False, rename={"a": "b"})},
         "init_from=nkserde.InitFrom('gs/ckpt', at='state', strict=0, rename={'a': 'b'})"),
    ],
)  # fmt: skip
def test_the_keywords_of_earlier_releases_still_work_and_say_their_new_spelling(former, now, spelling):
    with pytest.warns(FutureWarning) as warned:
        old = CheckpointOptions.given(**former)
    assert old == CheckpointOptions(**{**{k: v for k, v in former.items() if k in ("every", "keep")}, **now})
    assert len(warned) == 1 and str(warned[0].message).endswith(f"is deprecated; write {spelling}")
    assert warned[0].filename == __file__  # said at the caller's line


def test_a_former_keyword_beside_its_object_is_refused():
    with pytest.raises(ValueError, match="left out when job is given"):
        CheckpointOptions.given(job=nkserde.JobOptions(), walltime=60)
    with pytest.raises(TypeError, match="unexpected keyword arguments: evry"):
        CheckpointOptions.given(evry=10)


@pytest.mark.parametrize("option", sorted(CHOICES))
def test_every_string_option_is_checked_by_the_one_table(option):
    build = (lambda **o: JobOptions(**o)) if option == "requeue" else (lambda **o: CheckpointOptions(**o))
    for value in CHOICES[option]:
        build(**{option: value})
    listed = ", ".join(map(repr, CHOICES[option]))
    for bad in ("sometimes", None, 1):
        with pytest.raises(ValueError, match=f"^{option} must be one of {listed}, got {bad!r}$"):
            build(**{option: bad})


@pytest.mark.parametrize(
    "make, options, words",
    [
        (JobOptions, {"requeue_on_error": -1}, "requeue_on_error must be an int >= 0, got -1"),
        (JobOptions, {"requeue_on_error": True}, "requeue_on_error must be an int >= 0, got True"),
        (JobOptions, {"walltime": 0}, 'walltime must be "auto", None or a positive number of seconds, got 0'),
        (JobOptions, {"walltime": "1h"}, "walltime must be \"auto\", None or a positive number of seconds, got '1h'"),
        (CheckpointOptions, {"keep": 0}, "keep must be a number of checkpoints >= 1 or a keep policy, got 0"),
        (CheckpointOptions, {"job": 60}, "job must be a nkserde.JobOptions, got 60"),
        (nkserde.KeepMultiples, {"k": -2}, "KeepMultiples(k) must be an int >= 1, got -2"),
        (nkserde.WithinBudget, {"budget": 1}, "budget must be a fraction of the run between 0 and 1, got 1"),
    ],
)  # fmt: skip
def test_every_error_has_one_shape(make, options, words):
    with pytest.raises(ValueError) as raised:
        make(**options)
    assert str(raised.value) == words


def test_the_checkpoint_checks_its_options_when_it_is_made(tmp_path):
    with pytest.raises(ValueError, match="^on_write_error must be one of 'warn', 'raise', got 'ignore'$"):
        nkserde.Checkpoint(tmp_path, on_write_error="ignore")
    with pytest.raises(ValueError, match="^requeue must be one of 'auto', 'never', got 'always'$"):
        nkserde.checkpointed(object(), tmp_path, job=nkserde.JobOptions(requeue="always"))
    assert not any(tmp_path.iterdir())  # nothing written by a refusal


def test_options_are_a_frozen_value():
    import dataclasses

    options = CheckpointOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.resume = "never"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.job.walltime = None
