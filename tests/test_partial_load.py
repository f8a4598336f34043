"""Partial loads: a part of a file (at=), across kinds, non-strict with a
report, renames. One trained VMC run is saved once per module; each test
is a one-line load into another template and checks the numbers that
moved, the ones that stayed the template's, and the report."""

from __future__ import annotations

import sys
import warnings

import jax
import netket as nk
import numpy as np
import optax
import pytest

import builders
import nkserde
from nkserde.errors import NoSuchPathError, TemplateMismatchError


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def _same(a, b):
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(la, lb))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A VMC run of 3 steps and its file; its parameters differ from any
    freshly built template's."""
    driver = builders.vmc()
    builders.run(driver, 3)
    path = tmp_path_factory.mktemp("partial") / "vmc.nks"
    nkserde.save(driver, path)
    assert not _same(driver.state.parameters, builders.mc_state().parameters)
    return driver, path


def _one_warning(record):
    partial = [w for w in record if issubclass(w.category, nkserde.PartialLoadWarning)]
    assert len(partial) == 1, [str(w.message) for w in record]
    return partial[0].message


def _no_partial_load_warning(record) -> bool:
    return not any(issubclass(w.category, nkserde.PartialLoadWarning) for w in record)


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def test_at_state_loads_the_variational_state_of_a_driver(trained):
    driver, path = trained
    vs = nkserde.load(builders.mc_state(), path, at="state")
    assert _same(vs.parameters, driver.state.parameters)
    assert _same(vs.sampler_state.σ, driver.state.sampler_state.σ)


def test_at_parameters_into_a_parameter_pytree(trained):
    driver, path = trained
    params = nkserde.load(builders.mc_state().parameters, path, at="state/parameters")
    assert _same(params, driver.state.parameters)


def test_at_a_path_the_file_lacks_names_what_is_there(trained):
    _, path = trained
    with pytest.raises(NoSuchPathError, match=r"state/parametrs.*parameters"):
        nkserde.load(builders.mc_state().parameters, path, at="state/parametrs")


def test_mcstate_into_full_sum_state_and_the_report(trained):
    driver, path = trained
    with pytest.raises(TemplateMismatchError, match="strict=False"):
        nkserde.load(builders.full_sum_state(), path, at="state")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        exact, report = nkserde.load(builders.full_sum_state(), path, at="state", strict=False, report=True)
    assert _no_partial_load_warning(record)  # the report was asked for: returned, not warned about
    assert isinstance(exact, nk.vqs.FullSumState)
    assert _same(exact.parameters, driver.state.parameters)
    # the exact energy of the trained parameters, not of the template's
    _, _, H = builders.system()
    assert exact.expect(H).mean != builders.full_sum_state().expect(H).mean
    assert report.unexpected == [
        "state/cached_samples",
        "state/n_discard_per_chain",
        "state/n_samples",
        "state/sampler_seed",
        "state/sampler_state",
    ]
    assert report.missing == [] and report.differs == []
    # without report=True: one warning, at the line of the call
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = _line() + 1
        nkserde.load(builders.full_sum_state(), path, at="state", strict=False)
    warning = _one_warning(record)
    assert all(p in str(warning) for p in report.unexpected)
    assert warning.report.unexpected == report.unexpected
    (shown,) = [w for w in record if issubclass(w.category, nkserde.PartialLoadWarning)]
    assert (shown.filename, shown.lineno) == (__file__, line)


def test_full_sum_state_into_mcstate_keeps_the_template_sampler(tmp_path):
    exact = builders.full_sum_state()
    _, _, H = builders.system()
    nk.driver.VMC(H, optax.sgd(0.05), variational_state=exact).run(3, show_progress=False)
    nkserde.save(exact, tmp_path / "exact.nks")
    template = builders.mc_state()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        vs, report = nkserde.load(template, tmp_path / "exact.nks", strict=False, report=True)
    assert _same(vs.parameters, exact.parameters)
    assert _same(vs.sampler_state.σ, template.sampler_state.σ)
    assert sorted(report.missing) == [
        "cached_samples",
        "n_discard_per_chain",
        "n_samples",
        "sampler_seed",
        "sampler_state",
    ]
    assert "sampler_state" in str(report) and _no_partial_load_warning(record)


def test_vmc_into_vmc_sr_keeps_its_own_optimizer_state(trained):
    driver, path = trained
    template = builders.vmc_sr()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sr, report = nkserde.load(template, path, strict=False, report=True)
    assert "optimizer_state" in str(report) and _no_partial_load_warning(record)
    assert isinstance(sr, nk.driver.VMC_SR)
    assert _same(sr.state.parameters, driver.state.parameters)
    assert sr.step_count == 0
    assert _same(sr._optimizer_state, template._optimizer_state)
    assert "optimizer_state" in report.missing and "optimizer_state" in report.unexpected
    assert "preconditioner" in report.unexpected and "step" in report.missing
    builders.run(sr, 1)  # the new driver runs from there


def test_ground_state_into_tdvp(trained):
    driver, path = trained
    with pytest.warns(nkserde.PartialLoadWarning, match="integrator: missing in the file"):
        te = nkserde.load(builders.tdvp(exact=False), path, strict=False)
    assert isinstance(te, nk.experimental.TDVP)
    assert _same(te.state.parameters, driver.state.parameters)
    assert te.t == 0.0


def test_another_hamiltonian_is_the_template_s(trained):
    driver, path = trained
    graph, hilbert, _ = builders.system()
    H2 = nk.operator.Ising(hilbert, graph, h=0.5)
    template = nk.driver.VMC(H2, optax.adam(1e-2), variational_state=builders.mc_state())
    new = nkserde.load(template, path)  # strict: the operator is configuration
    assert new._ham is H2
    assert _same(new.state.parameters, driver.state.parameters)
    assert new.step_count == driver.step_count


def test_non_strict_names_every_entry_kept(trained):
    driver, path = trained
    # a model without visible bias and with twice the hidden units
    template = builders.mc_state(model=nk.models.RBM(alpha=2, use_visible_bias=False, param_dtype=float))
    with pytest.raises(TemplateMismatchError):
        nkserde.load(template, path, at="state")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        vs, report = nkserde.load(template, path, at="state", strict=False, report=True)
    assert report.unexpected == ["state/parameters/visible_bias"]
    assert sorted(report.differs) == ["state/parameters/Dense/bias", "state/parameters/Dense/kernel"]
    assert _same(vs.parameters, template.parameters)  # every parameter kept
    assert _same(vs.sampler_state.σ, driver.state.sampler_state.σ)  # the chains fit: loaded
    assert _no_partial_load_warning(record)
    assert all(p in str(report) for p in report.differs + report.unexpected)


def test_renames_mapping_and_function(trained):
    driver, path = trained
    stored = driver.state.parameters
    template = {"hidden": dict(stored["Dense"]), "visible_bias": stored["visible_bias"] * 0}
    with pytest.raises(TemplateMismatchError, match="hidden"):
        nkserde.load(template, path, at="state/parameters")
    params = nkserde.load(
        template, path, at="state/parameters", rename={"state/parameters/Dense": "state/parameters/hidden"}
    )
    assert _same(params["hidden"], stored["Dense"]) and _same(params["visible_bias"], stored["visible_bias"])
    params = nkserde.load(template, path, at="state/parameters", rename=lambda p: p.replace("Dense", "hidden"))
    assert _same(params["hidden"], stored["Dense"])


def test_chains_the_template_cannot_use_are_redrawn(trained):
    driver, path = trained
    graph, _, _ = builders.system()
    hilbert = nk.hilbert.Spin(0.5, builders.N, total_sz=0)
    template = nk.vqs.MCState(
        nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=8),
        nk.models.RBM(alpha=1, param_dtype=float),
        n_samples=64,
        seed=0,
        sampler_seed=1,
    )
    stored = np.asarray(driver.state.sampler_state.σ)
    valid = stored.sum(axis=-1) == 0
    n_bad = int((~valid).sum())
    assert n_bad  # the unconstrained chains break total_sz=0
    with pytest.warns(UserWarning, match=f"{n_bad} of 8 loaded chains are not states") as record:
        vs = nkserde.load(template, path, at="state")
    assert not any(issubclass(w.category, nkserde.PartialLoadWarning) for w in record)
    chains = np.asarray(vs.sampler_state.σ)
    assert (chains.sum(axis=-1) == 0).all()
    assert (chains[valid] == stored[valid]).all()  # the usable chains are the file's
    assert (chains[~valid] == np.asarray(template.sampler_state.σ)[~valid]).all()
    assert (np.asarray(vs.samples).sum(axis=-1) == 0).all()
    # and back: constrained chains are valid unconstrained ones, loaded silently
    tmp = path.parent / "constrained.nks"
    nkserde.save(vs, tmp)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = nkserde.load(builders.mc_state(), tmp)
    assert (np.asarray(back.sampler_state.σ) == chains).all()


# Lazy reads -------------------------------------------------------------------


def _rchar():
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar")).split()[1])


@pytest.fixture(scope="module")
def big_and_small(tmp_path_factory):
    """A file with a small entry and a 16 MB one (random: stored raw)."""
    rng = np.random.default_rng(0)
    obj = {
        "params": {"w": rng.normal(size=(8, 8))},
        "opt": {"mu": rng.normal(size=(2 << 20,)), "zeros": np.zeros(1 << 16)},
    }
    path = tmp_path_factory.mktemp("lazy") / "big.nks"
    nkserde.save(obj, path)
    return obj, path


def test_load_reads_only_what_the_template_asks_for(big_and_small):
    obj, path = big_and_small
    before = _rchar()
    params = nkserde.load({"w": np.zeros((8, 8))}, path, at="params")
    read = _rchar() - before
    assert (params["w"] == obj["params"]["w"]).all()
    assert read < 1 << 20, read  # the 16 MB entry was not read
    before = _rchar()
    nkserde.load(obj, path)
    assert _rchar() - before > 16 << 20


def test_a_damaged_entry_fails_only_the_loads_that_read_it(big_and_small, tmp_path):
    obj, path = big_and_small
    damaged = tmp_path / "damaged.nks"
    data = bytearray(path.read_bytes())
    with nkserde.open(path) as f:
        offset = f._lazy.header["arrays"][1]["offset"]  # opt/mu
    data[offset + 100] ^= 0xFF
    damaged.write_bytes(bytes(data))
    assert (nkserde.load({"w": np.zeros((8, 8))}, damaged, at="params")["w"] == obj["params"]["w"]).all()
    with pytest.raises(nkserde.errors.CorruptFileError, match="opt/mu|array 1"):
        nkserde.load(obj, damaged)


def test_open_reads_one_entry(big_and_small, trained):
    obj, path = big_and_small
    with nkserde.open(path) as f:
        assert sorted(f.keys()) == ["opt/mu", "opt/zeros", "params/w"]
        assert f.info["n_arrays"] == 3
        before = _rchar()
        w = f["params/w"]
        assert _rchar() - before < 1 << 20
        mu = f["opt/mu"]  # raw, one block: mapped, not read
        assert isinstance(mu, np.memmap) and _rchar() - before < 1 << 20
        assert (mu == obj["opt"]["mu"]).all() and (w == obj["params"]["w"]).all()
        zeros = f["opt/zeros"]  # compressed: read and verified
        assert not isinstance(zeros, np.memmap) and (zeros == 0).all()
        assert (f.read("opt/mu") == obj["opt"]["mu"]).all()
        assert "opt/mu" in f and "opt/nu" not in f
        with pytest.raises(NoSuchPathError, match="opt/nu"):
            f["opt/nu"]
    driver, path = trained
    with nkserde.open(path) as f:
        kernel = f["state/parameters/Dense/kernel"]
        assert (np.asarray(kernel) == np.asarray(driver.state.parameters["Dense"]["kernel"])).all()
        assert "state/sampler_state/chains" in f.keys()
        assert f.info["root_type"] == "netket.driver.VMC"


def test_the_readme_sweep_in_h_warm_starts_each_point(tmp_path):
    graph, hi, _ = builders.system()
    vs = builders.mc_state()
    hs, ends = [0.5, 1.0], []
    for i, h in enumerate(hs):
        H = nk.operator.Ising(hi, graph, h=h)
        if i:
            # a fresh template (the one in hand already holds the previous
            # end): only the file can give it those parameters
            fresh = builders.mc_state()
            assert not _same(fresh.parameters, ends[-1])
            vs = nkserde.load(fresh, tmp_path / f"h{hs[i - 1]}.nks", at="state")
            assert _same(vs.parameters, ends[-1])  # the previous point's end
        gs = nk.driver.VMC(H, nk.optimizer.Sgd(0.01), variational_state=vs)
        gs.run(2, show_progress=False)
        nkserde.save(gs, tmp_path / f"h{h}.nks")
        ends.append(gs.state.parameters)
    with pytest.warns(nkserde.PartialLoadWarning, match="state/sampler_state"):
        exact = nkserde.load(nk.vqs.FullSumState(hi, vs.model), tmp_path / "h1.0.nks", at="state", strict=False)
    assert _same(exact.parameters, ends[-1])
