"""NetKet's own files (flax .mpack, JsonLog's parameter files, nqxpack),
written by NetKet 3.21, 3.22 and 3.23 (tests/fixtures/netket-files-*/,
``generate.py netket-files V``), load into nkserde templates."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import netket as nk
import numpy as np
import pytest
from flax import serialization

import nkserde
from nkserde.errors import CorruptFileError, TemplateMismatchError

FIXTURES = Path(__file__).parent / "fixtures"
WRITERS = sorted(p.name for p in FIXTURES.glob("netket-files-*"))
HILBERT = nk.hilbert.Spin(0.5, N=8)


def mc_state(seed=5):
    return nk.vqs.MCState(
        nk.sampler.MetropolisLocal(HILBERT, n_chains=8),
        nk.models.RBM(alpha=1, param_dtype=float),
        n_samples=32,
        seed=seed,
        sampler_seed=3,
        n_discard_per_chain=1,
    )


def full_sum_state():
    return nk.vqs.FullSumState(HILBERT, nk.models.RBM(alpha=1, param_dtype=float), seed=5)


def assert_parameters(parameters, truth: Path):
    expected = np.load(truth)
    assert expected.files
    for name in expected.files:
        node = {"params": parameters}
        for key in name.split("/"):
            node = node[key]
        assert np.asarray(node).tobytes() == expected[name].tobytes(), name


def test_every_supported_netket_wrote_fixtures():
    assert {"netket-files-3.21.0", "netket-files-3.22.4", "netket-files-3.23.0"} <= set(WRITERS)


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("name", ["mcstate.mpack", "mcstate.nk"])
def test_mc_state_file_loads_with_its_sampler_state(writer, name, tmp_path):
    directory = FIXTURES / writer
    # recognised by content: the extension says nothing
    path = tmp_path / "renamed.bin"
    shutil.copy(directory / name, path)
    template = mc_state()
    loaded = nkserde.load(template, path)
    assert_parameters(loaded.parameters, directory / "truth.npz")
    assert loaded.n_samples == 64 and template.n_samples == 32  # the file's counts; template untouched
    # the sampler state is the file's, as NetKet's own loader restores it
    raw = serialization.msgpack_restore((directory / "mcstate.mpack").read_bytes())["sampler_state"]
    assert np.asarray(loaded.sampler_state.σ).tobytes() == raw["σ"].tobytes()
    assert np.asarray(jax.random.key_data(loaded.sampler_state.rng)).tobytes() == raw["rng"].tobytes()
    # log_prob, which NetKet does not store, is that of the chains at these parameters
    chains = np.asarray(loaded.sampler_state.σ)
    want = 2 * np.asarray(loaded.model.apply(loaded.variables, chains)).real
    np.testing.assert_allclose(np.asarray(loaded.sampler_state.log_prob), want, rtol=1e-12)
    assert np.all(np.isfinite(np.asarray(loaded.sample())))


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("name", ["fullsum.mpack", "fullsum.nk"])
def test_full_sum_state_file_loads(writer, name):
    loaded = nkserde.load(full_sum_state(), FIXTURES / writer / name)
    assert_parameters(loaded.parameters, FIXTURES / writer / "truth_fullsum.npz")
    assert np.isfinite(loaded.expect(nk.operator.Ising(HILBERT, nk.graph.Chain(8), h=1.0)).mean)


@pytest.mark.parametrize("writer", WRITERS)
def test_jsonlog_parameter_file_loads_into_a_state_or_a_dict(writer):
    path = FIXTURES / writer / "variables.mpack"
    loaded = nkserde.load(mc_state(), path)
    assert_parameters(loaded.parameters, FIXTURES / writer / "truth_variables.npz")
    params = nkserde.load(mc_state().parameters, path)
    assert_parameters(params, FIXTURES / writer / "truth_variables.npz")


def test_an_mpack_of_another_model_names_the_path():
    wider = nk.vqs.MCState(
        nk.sampler.MetropolisLocal(HILBERT, n_chains=8), nk.models.RBM(alpha=2, param_dtype=float), n_samples=32
    )
    with pytest.raises(
        TemplateMismatchError, match=r"mcstate.mpack: variables/params/Dense/(bias|kernel): file has array float64"
    ):
        nkserde.load(wider, FIXTURES / WRITERS[-1] / "mcstate.mpack")


def test_a_null_where_the_template_has_a_parameter_names_the_path(tmp_path):
    # nkserde's files store None for a value unset when saved; NetKet's never do
    parameters = jax.tree_util.tree_map(np.asarray, dict(mc_state().parameters))
    parameters["visible_bias"] = None
    path = tmp_path / "null.mpack"
    path.write_bytes(serialization.msgpack_serialize({"params": parameters}))
    for template in (mc_state(), mc_state().parameters):
        with pytest.raises(
            TemplateMismatchError, match=r"null.mpack: variables/params/visible_bias: the file has null, the template"
        ):
            nkserde.load(template, path)


def test_an_mpack_into_a_driver_says_what_the_file_holds():
    driver = nk.driver.VMC(
        nk.operator.Ising(HILBERT, nk.graph.Chain(8), h=1.0), nk.optimizer.Sgd(0.01), variational_state=mc_state()
    )
    with pytest.raises(TemplateMismatchError, match="holding an MCState.*not a VMC"):
        nkserde.load(driver, FIXTURES / WRITERS[-1] / "mcstate.mpack")


def test_damaged_netket_files_are_corrupt_file_errors(tmp_path):
    data = (FIXTURES / WRITERS[-1] / "mcstate.mpack").read_bytes()
    (tmp_path / "cut.mpack").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptFileError, match="cut.mpack"):
        nkserde.load(mc_state(), tmp_path / "cut.mpack")
    zipped = (FIXTURES / WRITERS[-1] / "mcstate.nk").read_bytes()
    (tmp_path / "cut.nk").write_bytes(zipped[:200])
    with pytest.raises(CorruptFileError, match="cut.nk"):
        nkserde.load(mc_state(), tmp_path / "cut.nk")
    (tmp_path / "text.txt").write_text("hello")
    with pytest.raises(CorruptFileError, match="text.txt"):
        nkserde.load(mc_state(), tmp_path / "text.txt")
