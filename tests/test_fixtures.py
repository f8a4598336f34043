"""Real old files (tests/fixtures/*/, written by tests/fixtures/generate.py
under NetKet 3.21, 3.22, 3.23 and by earlier nkserde commits) load into
today's templates and the runs continue.

Under the NetKet and JAX that wrote a file, on the kind of CPU that wrote
it, the continued run reproduces what the writer's own run did next, number
for number. Under another NetKet or JAX, or on another CPU, the loaded state
is the saved one, bit for bit, and the run continues (releases, and XLA's
code for another CPU, may compute the next steps differently)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jax
import netket as nk
import numpy as np
import pytest

import nkserde
from nkserde.caches import jax_executables as jax_cache

import scenarios  # tests/fixtures (pyproject's pythonpath)

FIXTURES = Path(__file__).parent / "fixtures"

WRITERS = sorted(p.parent.name for p in FIXTURES.glob("*/expected.json"))
CASES = [
    (w, name)
    for w in WRITERS
    for name, e in json.loads((FIXTURES / w / "expected.json").read_text())["scenarios"].items()
    if "skipped" not in e and name != "checkpoint"
]
CHECKPOINTS = [
    w
    for w in WRITERS
    if "skipped" not in json.loads((FIXTURES / w / "expected.json").read_text())["scenarios"]["checkpoint"]
]
# nkserde.Checkpoint needs NetKet's callback API (3.22 and later)
HAS_CHECKPOINT = hasattr(nk.callbacks, "AbstractCallback")
# Fixtures written before expected.json recorded the JAX release were all
# written under jax 0.10.2 (nkserde's floor then).
JAX_OF_OLD_FIXTURES = "0.10.2"


# Types whose files lack state that the continuation draws on: they load
# (with a warning saying so) and the run goes on, but not as the writer's.
INCOMPLETE = {"netket.pytree.QSR": "QSR stored by the fallback, without its batch generator"}


def _expected(writer):
    return json.loads((FIXTURES / writer / "expected.json").read_text())


def _same_releases(expected) -> bool:
    """Whether this interpreter has the NetKet and JAX releases that wrote
    the fixture."""
    return (expected["netket"], expected.get("jax", JAX_OF_OLD_FIXTURES)) == (nk.__version__, jax.__version__)


def _written_here(expected) -> bool:
    """Whether this interpreter and machine compute as the fixture's writer
    did: the same releases, the same kind of CPU (XLA compiles for the CPU
    it runs on) and XLA flags. Only then must a continued run give the
    writer's numbers. Measured on an AVX-512 machine against fixtures of
    another CPU: 4 of this file's 64 tests then fail (tdvp_rk23's adaptive
    step sizes), 25 under ``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` and 17 under
    ``SSE4_2`` (VMC with SR, Metropolis chains: a last bit of XLA's code
    turns into other numbers). Fixtures written before
    expected.json recorded the machine (2026-12-02) are of a CPU no one
    recorded: their continuations are not compared."""
    machine = (expected.get("cpu"), expected.get("xla_flags"))
    return _same_releases(expected) and machine == (jax_cache.cpu_kind(), os.environ.get("XLA_FLAGS", ""))


def _own_failures(name) -> set[str]:
    """The exception types that kept the writers of this NetKet and JAX
    from running the scenario (a fixture directory written under the same
    pair records them: NetKet 3.21's SR and VMC_SR call jax APIs that jax
    0.10 removed); empty where they ran it."""
    own = [_expected(w) for w in WRITERS if w.startswith("netket-") and _same_releases(_expected(w))]
    skipped = [e["scenarios"].get(name, {}).get("skipped") for e in own]
    return {reason.split(":")[0] for reason in skipped if reason}


def _runs_here(name) -> bool:
    return not _own_failures(name)


def test_fixtures_exist():
    # every supported NetKet minor version and the old formats and schemas
    assert {"netket-3.21.0", "netket-3.21.0-jax-0.7.0", "netket-3.22.4", "netket-3.23.0"} <= set(WRITERS)
    assert any(w.startswith("nkserde-") for w in WRITERS)


@pytest.mark.parametrize("writer, name", CASES)
def test_fixture_loads_and_continues(writer, name):
    expected = _expected(writer)
    case = expected["scenarios"][name]
    path = FIXTURES / writer / f"{name}.nks"
    info = nkserde.info(path)
    assert info["netket"] == expected["netket"] and info["format_version"] in (1, 2)
    assert info["process_count"] == 1 and info["types"]

    scenario = scenarios.SCENARIOS[name]
    incomplete = set(info["types"]) & set(INCOMPLETE)
    if incomplete:
        with pytest.warns(UserWarning, match="differ from the interrupted run"):
            loaded = nkserde.load(scenario.build(), path)
    else:
        loaded = nkserde.load(scenario.build(), path)
    assert scenarios.parameters_sha(loaded) == case["parameters_sha"]
    if case["step"] is not None:
        assert loaded.step_count == case["step"]
    if not _runs_here(name):
        # loaded bit for bit (above); continuing fails inside NetKet itself,
        # exactly as it did for this NetKet's own writer (not in nkserde)
        with pytest.raises(Exception) as failed:
            scenario.proceed_less(loaded)
        assert type(failed.value).__name__ in _own_failures(name), repr(failed.value)
        return
    got = scenario.proceed_less(loaded)
    assert len(got) and all(isinstance(x, str) or np.isfinite(x) for x in got)  # numbers, or parameter hashes
    if _written_here(expected) and not incomplete:
        assert got == case["proceed"][: len(got)]
        assert scenario.proceed_less is not scenario.proceed or len(got) == len(case["proceed"])
    # (under another NetKet or JAX, or on another CPU, the continuation may
    # log other times or compute differently: the loaded state above is the
    # saved one, bit for bit)


@pytest.mark.parametrize("writer", CHECKPOINTS)
def test_checkpoint_directory_resumes(writer, tmp_path):
    expected = _expected(writer)
    case = expected["scenarios"]["checkpoint"]
    shutil.copytree(FIXTURES / writer / "checkpoint", tmp_path / "run")
    directory = tmp_path / "run"
    # the newest checkpoint holds the driver after 4 steps
    driver = nkserde.load(scenarios._vmc(), directory / "ckpt")
    assert driver.step_count == case["step"]
    assert scenarios.parameters_sha(driver) == case["saved_parameters_sha"]
    if not HAS_CHECKPOINT:  # older NetKet: no resumable run loop; the loaded driver runs on
        assert np.all(np.isfinite(scenarios._run(driver, 2)))
        return
    nkserde.checkpoint.reset_run_numbering()
    finished, losses = scenarios.checkpoint_run(directory, scenarios.CHECKPOINT_TOTAL, nkserde.Checkpoint)
    assert finished.step_count == scenarios.CHECKPOINT_TOTAL
    assert len(losses) == len(case["proceed"]) == scenarios.CHECKPOINT_TOTAL
    logged = json.loads((directory / "log.log").read_text())
    assert logged[next(iter(logged))]["iters"] == list(range(scenarios.CHECKPOINT_TOTAL))
    if _written_here(expected):
        assert losses == case["proceed"]
        assert scenarios.parameters_sha(finished) == case["parameters_sha"]


# Checkpoint directories whose loggers hold whole histories (tests/fixtures/histories-*/)
HISTORIES = sorted(p.name for p in FIXTURES.glob("histories-*"))
SERIES = ["Energy", *(f"x{i}" for i in range(scenarios.HISTORY_OBSERVABLES))]


def _check_histories(runtime, directory, total):
    """Every series of the RuntimeLog and of the JsonLog's file holds every
    step once; the observables hold their values."""
    for name in SERIES:
        assert runtime.data[name].iters.tolist() == list(range(total)), name
    for i in range(scenarios.HISTORY_OBSERVABLES):
        assert runtime.data[f"x{i}"]["value"].tolist() == [scenarios.observable(i, s) for s in range(total)]
    logged = json.loads((directory / "log.log").read_text())
    assert set(SERIES) <= set(logged)
    assert all(series["iters"] == list(range(total)) for series in logged.values())


@pytest.mark.skipif(not HAS_CHECKPOINT, reason="nkserde.Checkpoint needs NetKet's callback API")
@pytest.mark.parametrize("writer", HISTORIES)
def test_checkpoint_with_logger_histories_resumes(writer, tmp_path):
    expected = json.loads((FIXTURES / writer / "histories.json").read_text())
    steps, total = expected["steps"], expected["total"]
    shutil.copytree(FIXTURES / writer / "checkpoint", tmp_path / "run")
    directory = tmp_path / "run"
    nkserde.checkpoint.reset_run_numbering()
    finished, runtime = scenarios.history_run(directory, total, nkserde.Checkpoint)
    assert finished.step_count == total
    _check_histories(runtime, directory, total)
    energies = np.real(np.asarray(runtime.data["Energy"]["Mean"])).tolist()
    assert energies[:steps] == expected["energies"][:steps]  # restored from the file, bit for bit
    if _written_here(expected):
        assert energies == expected["energies"]
        assert scenarios.parameters_sha(finished) == expected["parameters_sha"]


@pytest.mark.skipif(not HAS_CHECKPOINT, reason="nkserde.Checkpoint needs NetKet's callback API")
@pytest.mark.parametrize("writer", HISTORIES)
def test_old_checkpoints_resume_into_a_history_log(writer, tmp_path):
    """A resume from a checkpoint retention kept (the newer ones
    damaged), or the newest, restores the steps up to it once; the first checkpoint after
    it starts the history log with the whole histories (layout 2), the
    next ones append to it, and a later run resumes through it. The old
    files that stay (retention) are left as they are."""
    from nkserde.checkpoint.persist import logger_histories as histories

    expected = json.loads((FIXTURES / writer / "histories.json").read_text())
    total = expected["total"]
    # one that keep_every kept, with two newer ones damaged; the newest
    for kept in (expected["checkpoints"][1], expected["checkpoints"][-1]):
        step = int(kept[len("step-") : -len(".nks")])
        case = tmp_path / kept
        shutil.copytree(FIXTURES / writer / "checkpoint", case)
        ckpt = case / "ckpt"
        old = {p.name: p.read_bytes() for p in ckpt.glob("step-*.nks")}
        for newer in (name for name in old if name > kept):
            (ckpt / newer).write_bytes(old[newer][:-8])  # damaged: its trailer is cut off
        nkserde.checkpoint.reset_run_numbering()
        with pytest.warns(UserWarning, match="skipping checkpoint") if step < expected["steps"] else _no_warning():
            finished, runtime = scenarios.history_run(case, total, nkserde.Checkpoint)
        assert finished.step_count == total
        _check_histories(runtime, case, total)
        energies = np.real(np.asarray(runtime.data["Energy"]["Mean"])).tolist()
        assert energies[:step] == expected["energies"][:step]
        if _written_here(expected):
            assert energies == expected["energies"]
        # the old checkpoints retention kept are as they were (8 and 16: keep_every)
        assert all((ckpt / n).read_bytes() == data for n, data in old.items() if n <= kept and (ckpt / n).exists())
        assert {"step-0000000008.nks", "step-0000000016.nks"} & set(old) <= {p.name for p in ckpt.glob("step-*")}
        newest = nkserde.Checkpoint(ckpt).latest()
        state = nkserde.load_state_dict(newest)
        assert state["layout"] == 2 and state["loggers"]["RuntimeLog#0"]["@type"] == "nkserde.checkpoint.LoggerHistory"
        assert histories.resolve(newest, state)["history"]["logged"] == ["JsonLog:log", "RuntimeLog#0"]
    # the run continued from the last one goes on through its history log
    nkserde.checkpoint.reset_run_numbering()
    longer, runtime = scenarios.history_run(case, total + 4, nkserde.Checkpoint)
    assert longer.step_count == total + 4
    _check_histories(runtime, case, total + 4)
    assert [p.name for p in (case / "ckpt").glob("history-*.nkh")] == ["history-000001.nkh"]


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
