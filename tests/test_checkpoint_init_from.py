"""Checkpoint(init_from=...): a run that starts from another run's state
(transfer learning), keeps its own fingerprint, and resumes its own
checkpoints once it has them."""

from __future__ import annotations

import json

import netket as nk
import optax
import pytest

import builders as B
import nkserde
from nkserde.checkpoint.fingerprint import fingerprint


def _vmc_at(h, state=None):
    graph, hilbert, _ = B.system()
    return nk.driver.VMC(
        nk.operator.Ising(hilbert, graph, h=h), optax.adam(1e-2), variational_state=state or B.mc_state()
    )


@pytest.fixture(scope="module")
def previous_point(tmp_path_factory):
    """The run at h=1.0: 3 steps, checkpointed."""
    directory = tmp_path_factory.mktemp("h1")
    driver = _vmc_at(1.0)
    driver.run(3, callback=nkserde.Checkpoint(directory, every=1), show_progress=False)
    return directory, driver


def test_the_next_point_of_a_sweep_starts_from_the_previous_one(tmp_path, previous_point):
    source, previous = previous_point
    driver = _vmc_at(2.0)
    ckpt = nkserde.Checkpoint(tmp_path, every=1, init_from=source)
    driver.run(2, callback=ckpt, show_progress=False)

    # the same two steps taken by hand from the previous point's state
    expected = _vmc_at(2.0)
    expected.state.parameters = previous.state.parameters
    expected.state.sampler_state = previous.state.sampler_state
    expected.run(2, show_progress=False)
    assert B.params_bytes(driver) == B.params_bytes(expected)
    assert ckpt.resumed_from is None and driver.step_count == 2  # its own count
    stored = json.loads((tmp_path / "fingerprint.json").read_text())
    assert stored == fingerprint(_vmc_at(2.0))  # its own operator, not h=1's
    assert stored != fingerprint(_vmc_at(1.0))


def test_a_restart_resumes_its_own_checkpoints_not_the_source(tmp_path, previous_point):
    source, _ = previous_point
    with pytest.raises(RuntimeError, match="crash"):
        _vmc_at(2.0).run(
            4, show_progress=False, callback=[nkserde.Checkpoint(tmp_path, every=1, init_from=source), B.CrashAt(2)]
        )
    straight = _vmc_at(2.0)
    straight.run(4, callback=nkserde.Checkpoint(tmp_path / "straight", every=1, init_from=source), show_progress=False)
    again = nkserde.Checkpoint(tmp_path, every=1, init_from=source)
    driver = _vmc_at(2.0)
    driver.run(4, callback=again, show_progress=False)
    assert again.resumed_from == 2
    assert B.params_bytes(driver) == B.params_bytes(straight)


def test_an_exact_check_starts_from_the_mcstate(tmp_path, previous_point):
    source, previous = previous_point
    graph, hilbert, H = B.system()
    exact = nk.driver.VMC(H, optax.sgd(0.0), variational_state=B.full_sum_state())
    ckpt = nkserde.Checkpoint(tmp_path, every=1, init_from=nkserde.InitFrom(source, strict=False))
    with pytest.warns(nkserde.PartialLoadWarning):
        exact.run(1, callback=ckpt, show_progress=False)  # learning rate 0: parameters stay
    B.assert_same_leaves(B.leaves(exact.state.parameters), B.leaves(previous.state.parameters))


def test_a_bad_source_names_the_run_and_the_source(tmp_path):
    with pytest.raises(nkserde.errors.NkserdeError, match=f"{tmp_path / 'run'}.*init_from="):
        _vmc_at(2.0).run(
            1, show_progress=False, callback=nkserde.Checkpoint(tmp_path / "run", init_from=tmp_path / "none")
        )
