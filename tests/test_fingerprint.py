"""The "same script?" fingerprint (nkserde/checkpoint/run_fingerprint.py): which changes a
``resume="auto"`` refuses, which it accepts, and that it is the same in
every Python process (PYTHONHASHSEED) for models whose repr is not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import netket as nk
import netket.experimental as nkx
import numpy as np
import optax
import pytest

from nkserde.checkpoint.run_fingerprint import changes, fingerprint

L = 8


def vmc(
    J2=0.5,
    field=0.0,
    pbc=True,
    total_sz=0,
    model="rbm",
    alpha=1,
    sampler="exchange",
    n_chains=8,
    n_samples=64,
    n_discard=2,
    optimizer=None,
    diag_shift=0.01,
    chunk_size=None,
    jax_op=True,
):
    graph = nk.graph.Chain(L, pbc=pbc, max_neighbor_order=2)
    hilbert = nk.hilbert.Spin(0.5, N=L, total_sz=total_sz)
    H = nk.operator.Heisenberg(hilbert, graph, J=[1.0, J2])
    if field:
        H = H + field * nk.operator.spin.sigmaz(hilbert, 0)
    # NetKet 3.23 builds a LocalOperatorJax, whose repr shows no couplings
    H = H.to_jax_operator() if jax_op else H.to_numba_operator()
    if model == "rbm":
        net = nk.models.RBM(alpha=alpha, param_dtype=float)
    elif model == "gcnn":
        net = nk.models.GCNN(symmetries=graph, layers=1, features=2, param_dtype=float)
    else:  # gcnn over translations only: another symmetry group
        net = nk.models.GCNN(symmetries=graph.translation_group(), layers=1, features=2, param_dtype=float)
    if sampler == "exchange":
        sa = nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=n_chains)
    else:
        sa = nk.sampler.MetropolisHamiltonian(hilbert, H, n_chains=n_chains)
    vs = nk.vqs.MCState(
        sa, net, n_samples=n_samples, n_discard_per_chain=n_discard, seed=0, sampler_seed=1, chunk_size=chunk_size
    )
    opt = optimizer if optimizer is not None else optax.sgd(0.01)
    return nk.driver.VMC(H, opt, variational_state=vs, preconditioner=nk.optimizer.SR(diag_shift=diag_shift))


def tdvp(h=0.5, dt=0.01, solver="RK4"):
    graph = nk.graph.Chain(L)
    hilbert = nk.hilbert.Spin(0.5, N=L)
    H = nk.operator.Ising(hilbert, graph, h=h)
    vs = nk.vqs.FullSumState(hilbert, nk.models.RBM(alpha=1, param_dtype=complex), seed=0)
    return nkx.TDVP(H, variational_state=vs, ode_solver=getattr(nkx.dynamics, solver)(dt=dt))


BASE = fingerprint(vmc())

# change -> a key the refusal must name
REFUSED = {
    "coupling J2 0.5 -> 0.8": (dict(J2=0.8), "operator"),
    "an added operator term": (dict(field=0.3), "operator"),
    "open instead of periodic lattice": (dict(pbc=False), "operator"),
    "total_sz constraint dropped": (dict(total_sz=None), "hilbert"),
    "model width": (dict(alpha=2), "model.alpha"),
    "model architecture": (dict(model="gcnn"), "model"),
    "sampler rule": (dict(sampler="hamiltonian"), "sampler.rule"),
    "number of chains": (dict(n_chains=16), "n_chains"),
    "number of samples": (dict(n_samples=128), "n_samples"),
    "discarded samples": (dict(n_discard=4), "n_discard_per_chain"),
    "learning rate": (dict(optimizer=optax.sgd(0.02)), "optimizer.update.update_fns.1.tx.update.step_size"),
    "optimizer": (dict(optimizer=optax.adam(0.01)), "optimizer.update.update_fns.0.tx.update"),
    "preconditioner setting": (dict(diag_shift=0.1), "preconditioner.diag_shift"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_changes(name):
    kwargs, key = REFUSED[name]
    found = changes(BASE, fingerprint(vmc(**kwargs)))
    assert any(line.startswith(f"{key}:") for line in found), found


def test_the_same_physics_written_differently_is_the_same_run():
    # a numba LocalOperator and its jax version act the same: one entry
    assert changes(BASE, fingerprint(vmc(jax_op=False))) == []


def test_accepted_changes():
    assert changes(BASE, fingerprint(vmc(chunk_size=32))) == []  # memory, not physics
    assert changes(BASE, fingerprint(vmc())) == []
    assert not any(socket.gethostname() in v for v in BASE.values())


def test_symmetry_group_is_compared_by_content():
    full, translations = fingerprint(vmc(model="gcnn")), fingerprint(vmc(model="gcnn-translations"))
    assert any(line.startswith("model.symmetries:") for line in changes(full, translations))
    assert changes(full, fingerprint(vmc(model="gcnn"))) == []


@pytest.mark.parametrize(
    "kwargs,key",
    [
        (dict(h=2.0), "operator"),  # a quench to another field: TDVP keeps the operator in a lambda
        (dict(dt=0.02), "integrator.solver"),
        (dict(solver="Heun"), "integrator.solver"),
    ],
)
def test_dynamics_changes_are_refused(kwargs, key):
    found = changes(fingerprint(tdvp()), fingerprint(tdvp(**kwargs)))
    assert any(line.startswith(key) for line in found), found


def test_an_infidelity_target_from_a_random_seed_is_the_same_run():
    """NetKet's Infidelity example builds its target without a seed: the
    target's parameters are state (the checkpoint restores them), not part
    of what defines the run."""
    graph = nk.graph.Chain(L)
    hilbert = nk.hilbert.Spin(0.5, N=L)
    H = nk.operator.Ising(hilbert, graph, h=1.0)

    def build():
        sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
        target = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=64)  # random seed
        vs = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=64, seed=0, sampler_seed=1)
        return nk.driver.Infidelity_SR(target, optax.sgd(0.01), operator=H, variational_state=vs, diag_shift=1e-4)

    assert changes(fingerprint(build()), fingerprint(build())) == []


def qsr(basis_letters="XYZ"):
    """NetKet's QSR on 4 spins: measurement bases as strings, which NetKet
    turns into an object array of operators (one per measurement)."""
    hilbert = nk.hilbert.Spin(0.5, N=4)
    rng = np.random.default_rng(7)
    bases = ["".join(rng.choice(list(basis_letters), size=4)) for _ in range(60)]
    sigma = (2.0 * rng.integers(0, 2, size=(60, 4)) - 1).astype(float)
    vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert, n_chains=8), nk.models.RBM(alpha=1), n_samples=64, seed=0)
    return nkx.QSR((sigma, bases), 16, optax.sgd(0.01), variational_state=vs, seed=7)


_PRINT_FINGERPRINTS = """
import json, sys
sys.path.insert(0, {tests!r})
from test_fingerprint import qsr, vmc
from nkserde.checkpoint.run_fingerprint import fingerprint
print(json.dumps({{"gcnn": fingerprint(vmc(model="gcnn")), "qsr": fingerprint(qsr())}}))
"""


@pytest.fixture(scope="module")
def in_other_processes():
    """The fingerprints of a GCNN's VMC and of a QSR, each computed in two
    other Python processes of different hash seeds (one launch each for
    both tests: a launch imports NetKet)."""
    script = _PRINT_FINGERPRINTS.format(tests=str(Path(__file__).parent))
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return outputs


def test_same_in_every_process_whatever_the_hash_seed(in_other_processes):
    """A GCNN's repr holds HashableArray hashes that differ between Python
    processes; the fingerprint does not."""
    first, second = (out["gcnn"] for out in in_other_processes)
    assert first == second == fingerprint(vmc(model="gcnn"))


def test_an_object_array_is_fingerprinted_by_content_in_every_process(in_other_processes):
    """QSR's measurement bases are a numpy object array of operators: its
    bytes are pointers, different in every process (before: every restart
    of NetKet's QSR example was refused as another run). Described element
    by element, this process and others agree, and other bases are another run."""
    here = fingerprint(qsr())
    bases = [v for k, v in here.items() if v.startswith("object[")]
    assert bases, here  # the bases are described, as an object array
    assert all(out["qsr"] == here for out in in_other_processes)  # other processes, other addresses
    assert any("object[" in line for line in changes(here, fingerprint(qsr(basis_letters="XZ"))))
