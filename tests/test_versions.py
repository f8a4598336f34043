"""Schema versions across nkserde and NetKet releases: migrations (with and
without the template), old names, optional fields, files from the future,
and :func:`nkserde.migrate`. Real old files are in test_fixtures.py."""

from __future__ import annotations

import json
from pathlib import Path

import netket as nk
import numpy as np
import pytest

import nkserde
from nkserde import format as fileformat
from nkserde.types import registry
from nkserde.errors import MigrationError, NkserdeError, UnsupportedVersionError
from nkserde.types.placement import ProcessValues

import scenarios  # tests/fixtures (pyproject's pythonpath)

FIXTURES = Path(__file__).parent / "fixtures"


def _state():
    hilbert = nk.hilbert.Spin(0.5, N=8)
    return nk.vqs.MCState(
        nk.sampler.MetropolisLocal(hilbert, n_chains=8),
        nk.models.RBM(alpha=1, param_dtype=float),
        n_samples=64,
        seed=0,
        sampler_seed=1,
        n_discard_per_chain=2,
    )


def _without_log_prob(state: dict) -> dict:
    """The state dict as nkserde before commit 9f5299c wrote it: the
    Metropolis sampler state at version 1, without log_prob."""
    sampler = state["sampler_state"]
    del sampler["log_prob"]
    sampler["@version"] = 1
    return state


def test_metropolis_v1_log_prob_is_recomputed_from_the_state(tmp_path):
    vs = _state()
    vs.sample()
    vs.reset()
    nkserde.save_state_dict(_without_log_prob(nkserde.state_dict(vs)), tmp_path / "old.nks")
    loaded = nkserde.load(_state(), tmp_path / "old.nks")
    # what NetKet's own reset computes: machine_pow * Re log psi(chains)
    sampler = loaded.sampler_state
    want = vs.sampler.machine_pow * np.asarray(vs.model.apply(vs.variables, sampler.σ)).real
    np.testing.assert_allclose(np.asarray(sampler.log_prob), want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(
        np.asarray(sampler.log_prob), np.asarray(vs.sampler_state.log_prob), rtol=1e-13, atol=1e-13
    )
    # the chains continue as the original's
    a, b = (
        vs.sampler.sample(vs.model, vs.variables, state=vs.sampler_state, chain_length=4)[0],
        loaded.sampler.sample(loaded.model, loaded.variables, state=sampler, chain_length=4)[0],
    )
    assert np.array_equal(np.asarray(a), np.asarray(b))


def test_metropolis_v1_alone_needs_its_state(tmp_path):
    vs = _state()
    state = _without_log_prob(nkserde.state_dict(vs))
    nkserde.save_state_dict(state["sampler_state"], tmp_path / "sampler.nks")
    with pytest.raises(MigrationError, match="log_prob.*MCState|variational state") as err:
        nkserde.load(vs.sampler_state, tmp_path / "sampler.nks")
    assert "sampler.nks" in str(err.value) and "MetropolisSamplerState" in str(err.value)


def test_a_file_from_a_newer_nkserde_is_refused_with_both_versions(tmp_path):
    vs = nk.vqs.FullSumState(nk.hilbert.Spin(0.5, N=4), nk.models.RBM(alpha=1), seed=0)
    state = nkserde.state_dict(vs)
    state["@version"] = 7
    nkserde.save_state_dict(state, tmp_path / "future.nks")
    with pytest.raises(UnsupportedVersionError) as err:
        nkserde.load(vs, tmp_path / "future.nks")
    message = str(err.value)
    for part in (
        "future.nks",
        "netket.vqs.FullSumState",
        "version 7",
        "version 1",
        f"nkserde {nkserde.info(tmp_path / 'future.nks')['nkserde']}",
    ):
        assert part in message, (part, message)


def test_old_module_path_names_load():
    # nkserde 0.1 named NetKet internals by module path (NetKet 3.23's)
    cb = nk.callbacks.EarlyStopping(patience=5)
    state = {
        "@type": "netket._src.callbacks.early_stopping.EarlyStopping",
        "@version": 1,
        "_best_val": -3.5,
        "_best_iter": 7,
        "_best_patience_counter": 2,
    }
    loaded = nkserde.from_state_dict(cb, state)
    assert (loaded._best_val, loaded._best_iter, loaded._best_patience_counter) == (-3.5, 7, 2)
    assert loaded.patience == 5  # configuration: the template's


def test_convergence_stopping_v1_is_migrated():
    cb = nk.callbacks.ConvergenceStopping(-1.0, smoothing_window=4, patience=3)
    v1 = {
        "@type": "netket._src.callbacks.convergence_stopping.ConvergenceStopping",
        "@version": 1,
        "_loss_window": [0.0, 0.0, -1.5, -2.5],
        "_n_losses": 2,
        "_patience_counter": 1,
    }
    loaded = nkserde.from_state_dict(cb, v1)
    assert nkserde.state_dict(loaded)["recent_losses"] == [-1.5, -2.5]
    assert nkserde.state_dict(loaded)["patience_counter"] == 1


class _Versioned:
    def __init__(self, w, norm=None):
        self.w, self.norm = w, norm


def test_a_migration_receives_the_template_and_the_enclosing_objects():
    registry.register(
        _Versioned,
        name="tests.Versioned",
        version=2,
        fields=("w", "norm"),
        to_state=lambda o: {"w": o.w, "norm": o.norm},
        from_state=lambda t, f: _Versioned(f["w"], f["norm"]),
    )
    seen = {}

    @nkserde.migration("tests.Versioned", from_version=1)
    def _(fields, context):
        seen["template"], seen["path"] = context.template, context.path
        seen["outer"] = context.enclosing(_Versioned)
        fields["norm"] = float(np.linalg.norm(fields["w"])) + context.template.w.size
        return fields

    template = _Versioned(np.zeros(3), 0.0)
    loaded = nkserde.from_state_dict(
        {"x": template}, {"x": {"@type": "tests.Versioned", "@version": 1, "w": np.ones(4)[:3]}}
    )
    assert loaded["x"].norm == pytest.approx(np.sqrt(3) + 3)
    assert seen["template"] is template and seen["path"] == ("x",) and seen["outer"] is None


# nkserde.migrate ---------------------------------------------------------------------


def test_migrate_rewrites_at_todays_versions_and_loads_the_same(tmp_path):
    vs = _state()
    vs.sample()
    vs.reset()
    # a v1 file that needs no template: ConvergenceStopping's old layout
    old = {
        "vs": nkserde.state_dict(vs),
        "cb": {
            "@type": "netket._src.callbacks.convergence_stopping.ConvergenceStopping",
            "@version": 1,
            "_loss_window": [0.0, -1.0],
            "_n_losses": 1,
            "_patience_counter": 0,
        },
    }
    nkserde.save_state_dict(old, tmp_path / "old.nks")
    out = nkserde.migrate(tmp_path / "old.nks")
    assert out == tmp_path / "old.migrated.nks"
    info = nkserde.info(out)
    assert info["types"]["netket.callbacks.ConvergenceStopping"] == 2
    assert info["migrated_from"]["format_version"] == fileformat.FORMAT_VERSION
    template = {"vs": _state(), "cb": nk.callbacks.ConvergenceStopping(-2.0, smoothing_window=2)}
    a, b = nkserde.load(template, tmp_path / "old.nks"), nkserde.load(template, out)
    assert nkserde.state_dict(a["cb"]) == nkserde.state_dict(b["cb"])
    assert np.asarray(a["vs"].samples).tobytes() == np.asarray(b["vs"].samples).tobytes()


def test_migrate_never_overwrites_its_source_unless_asked(tmp_path):
    nkserde.save({"a": np.arange(3)}, tmp_path / "f.nks")
    before = (tmp_path / "f.nks").read_bytes()
    with pytest.raises(NkserdeError, match="overwrite"):
        nkserde.migrate(tmp_path / "f.nks", tmp_path / "f.nks")
    assert (tmp_path / "f.nks").read_bytes() == before
    assert nkserde.migrate(tmp_path / "f.nks", overwrite=True) == tmp_path / "f.nks"
    assert nkserde.load({"a": np.zeros(3, int)}, tmp_path / "f.nks")["a"].tolist() == [0, 1, 2]


def test_migrate_asks_for_a_template_when_a_migration_needs_one(tmp_path):
    vs = _state()
    nkserde.save_state_dict(_without_log_prob(nkserde.state_dict(vs)), tmp_path / "old.nks")
    with pytest.raises(MigrationError, match="old.nks.*needs"):
        nkserde.migrate(tmp_path / "old.nks")
    out = nkserde.migrate(tmp_path / "old.nks", template=_state())
    assert nkserde.info(out)["types"]["netket.sampler.MetropolisSamplerState"] == 2
    assert nkserde.load_state_dict(out)["sampler_state"]["log_prob"].shape == (8,)


def test_migrate_keeps_every_process_value(tmp_path):
    # what a file of a 2-process run holds for a per-process field
    state = {
        "rng": ProcessValues([np.arange(4, dtype=np.uint32), np.arange(4, dtype=np.uint32) + 9]),
        "count": ProcessValues([3, 5]),
    }
    fileformat.write_file(tmp_path / "mp.nks", state, {"process_count": 2})
    out = nkserde.migrate(tmp_path / "mp.nks")
    loaded = nkserde.load_state_dict(out)
    assert [v.tolist() for v in loaded["rng"].values] == [[0, 1, 2, 3], [9, 10, 11, 12]]
    assert loaded["count"].values == [3, 5]
    assert nkserde.info(out)["process_count"] == 2


def test_format_1_fixture_migrates_to_format_2(tmp_path):
    old = next(p for p in sorted(FIXTURES.glob("nkserde-*/vmc_adam.nks")) if nkserde.info(p)["format_version"] == 1)
    out = nkserde.migrate(old, tmp_path / "new.nks", template=scenarios._vmc())
    assert nkserde.info(out)["format_version"] == fileformat.FORMAT_VERSION
    assert nkserde.info(out)["migrated_from"]["format_version"] == 1
    expected = json.loads((old.parent / "expected.json").read_text())["scenarios"]["vmc_adam"]
    loaded = nkserde.load(scenarios._vmc(), out)
    assert scenarios.parameters_sha(loaded) == expected["parameters_sha"]
    assert loaded.step_count == expected["step"]
