"""netket.experimental.vqs.DeterminantVariationalState: a Slater determinant
(Hartree-Fock) state over spin-1/2 fermions, optimized by VMC on a 4-site
Fermi-Hubbard ring. Its expectation values and gradients are exact (Wick's
theorem), so a resumed run must equal the uninterrupted one bit for bit.

NetKet 3.22 and 3.23 cannot run VMC on this state as the driver is built:
``VMC.__init__`` replaces a particle-number-conserving Hamiltonian on a
Hilbert space of fixed particle number (which this state requires) by
``hamiltonian.collect()``, a ``ParticleNumber(AndSpin)ConservingFermioperator2nd``,
and NetKet's expectation rule for those operators fails (it calls
``to_fermionoperator2nd``, which the spin-conserving class lacks, and
``expect_and_forces_fermionicmf``, a name plum's ``register`` bound to None).
:func:`vmc` hands the driver back the normal-ordered ``FermionOperator2nd``
the state's rules do support (what NetKet 3.21's driver keeps anyway).
"""

from __future__ import annotations

import jax
import netket as nk
import numpy as np
import optax
import pytest
from netket.operator import fermion

import nkserde
from builders import assert_differs, assert_identical, assert_unchanged, leaves, params_bytes
from nkserde.errors import TemplateMismatchError

DeterminantVariationalState = getattr(nk.experimental.vqs, "DeterminantVariationalState", None)
pytestmark = pytest.mark.skipif(
    DeterminantVariationalState is None, reason="NetKet without DeterminantVariationalState"
)

N_STEPS, K = 6, 3
KINDS = {
    "restricted": {"restricted": True},
    "unrestricted": {"restricted": False},
    "generalized": {"generalized": True},
    "complex": {"restricted": False, "param_dtype": complex},
}


def hilbert(n_orbitals=4):
    return nk.hilbert.SpinOrbitalFermions(n_orbitals, s=1 / 2, n_fermions_per_spin=(1, 1))


def hubbard(hi, t=1.0, U=4.0):
    """The Fermi-Hubbard ring on ``hi``'s orbitals, normal ordered."""
    L = hi.n_orbitals
    hop = sum(
        fermion.create(hi, i, sz=sz) @ fermion.destroy(hi, (i + 1) % L, sz=sz)
        + fermion.create(hi, (i + 1) % L, sz=sz) @ fermion.destroy(hi, i, sz=sz)
        for i in range(L)
        for sz in (-1, 1)
    )
    interaction = sum(fermion.number(hi, i, sz=1) @ fermion.number(hi, i, sz=-1) for i in range(L))
    return (-t * hop + U * interaction).to_normal_order()


def state(kind="unrestricted", n_orbitals=4, seed=0):
    return DeterminantVariationalState(hilbert(n_orbitals), seed=seed, **KINDS[kind])


def vmc(kind="unrestricted", n_orbitals=4, optimizer=None, **kw):
    vs = state(kind, n_orbitals)
    H = hubbard(vs.hilbert)
    driver = nk.driver.VMC(H, optimizer or optax.adam(0.05), variational_state=vs, **kw)
    if not isinstance(driver._ham, nk.operator.FermionOperator2nd):
        driver._ham = H  # NetKet >= 3.22: see the module docstring
    return driver


def energies(driver, n):
    log = nk.logging.RuntimeLog()
    driver.run(n, out=log, show_progress=False)
    return np.asarray(log.data["Energy"]["Mean"])


def assert_same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), f"resumed {a} != straight {b}"


@pytest.mark.parametrize(
    "kind, optimizer",
    [
        ("restricted", "adam"),
        ("generalized", "adam"),
        ("complex", "adam"),
        ("unrestricted", "sgd"),
    ],
)
def test_vmc_resumes_bit_for_bit(tmp_path, kind, optimizer):
    def build():
        opt = optax.adam(0.05) if optimizer == "adam" else optax.sgd(0.1)
        return vmc(kind, optimizer=opt)

    straight_driver = build()
    straight = energies(straight_driver, N_STEPS)

    first_driver = build()
    first = energies(first_driver, K)
    nkserde.save(first_driver, tmp_path / "det.nks")
    template = build()
    before = leaves(template)
    assert_differs(first_driver, template)
    resumed = nkserde.load(template, tmp_path / "det.nks")
    assert_unchanged(before, template)
    assert resumed.step_count == K
    assert_identical(resumed, first_driver)
    second = energies(resumed, N_STEPS - K)

    assert len(straight) == N_STEPS
    assert_same_bits(np.concatenate([first, second]), straight)
    assert resumed.step_count == straight_driver.step_count == N_STEPS
    assert params_bytes(resumed) == params_bytes(straight_driver)
    # the run really moved the orbitals, and Adam's moments are in the file
    assert params_bytes(first_driver) != params_bytes(build())
    sd = nkserde.state_dict(first_driver)
    assert sd["state"]["@type"] == "netket.experimental.vqs.DeterminantVariationalState"
    if optimizer == "adam":
        moments = [x for x in jax.tree_util.tree_leaves(sd["optimizer_state"]) if isinstance(x, np.ndarray)]
        assert any(np.any(x != 0) for x in moments)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_state_round_trip_restores_parameters_exactly(tmp_path, kind):
    vs = state(kind, seed=1)
    rdm = np.asarray(vs.rdm)
    nkserde.save(vs, tmp_path / "vs.nks")

    template = state(kind, seed=2)
    _ = template.rdm  # a cached density matrix of the template's own parameters
    before = leaves(template)
    assert_differs(vs, template)
    loaded = nkserde.load(template, tmp_path / "vs.nks")
    assert_unchanged(before, template)

    assert type(loaded) is type(vs)
    assert_identical(loaded, vs)
    got, structure = jax.tree_util.tree_flatten_with_path(loaded.parameters)
    want, expected = jax.tree_util.tree_flatten_with_path(vs.parameters)
    assert structure == expected
    for (path, a), (_, b) in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), path
    # the density matrix is the loaded parameters', not the template's cache
    assert np.asarray(loaded.rdm).tobytes() == rdm.tobytes()
    H = hubbard(vs.hilbert)
    assert np.asarray(loaded.expect(H).mean).tobytes() == np.asarray(vs.expect(H).mean).tobytes()


@pytest.mark.parametrize("n_orbitals", [3, 6])
def test_another_number_of_orbitals_is_a_template_mismatch(tmp_path, n_orbitals):
    driver = vmc()
    energies(driver, 1)
    nkserde.save(driver, tmp_path / "driver.nks")
    with pytest.raises(TemplateMismatchError, match=r"state/parameters/M_0"):
        nkserde.load(vmc(n_orbitals=n_orbitals), tmp_path / "driver.nks")

    nkserde.save(driver.state, tmp_path / "state.nks")
    with pytest.raises(TemplateMismatchError, match=r"parameters/M_0"):
        nkserde.load(state(n_orbitals=n_orbitals), tmp_path / "state.nks")


def test_another_hartree_fock_kind_is_a_template_mismatch(tmp_path):
    # restricted: one set of orbitals {"M"}; unrestricted: one per spin {"M_0", "M_1"}
    nkserde.save(state("unrestricted"), tmp_path / "uhf.nks")
    with pytest.raises(TemplateMismatchError, match=r"parameters"):
        nkserde.load(state("restricted"), tmp_path / "uhf.nks")
