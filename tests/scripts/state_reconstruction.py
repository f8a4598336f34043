"""A NetKet user's script in the shape of NetKet's
Examples/StateReconstruction/ising_1d_qsr.py (QSR of the ground state of a
3-spin open Ising chain from measurements in all 27 Pauli bases; the
example's generate_data and BasisGeneratorFull inlined; the ground state
by numpy's eigh instead of lanczos_ed), fewer shots and steps, seeds fixed,
the plot replaced by the JsonLog, with one ``nkserde.checkpointed`` line.

    python state_reconstruction.py WORKDIR
"""

import sys
from itertools import product
from pathlib import Path

import netket as nk
import netket.experimental as nkx
import numpy as np

import nkserde

out = Path(sys.argv[1])


def build_rotation(hi, basis, dtype=np.complex64):
    localop = nk.operator.LocalOperator(hi, constant=1.0, dtype=dtype)
    U_X = 1.0 / (np.sqrt(2)) * np.asarray([[1.0, 1.0], [1.0, -1.0]])
    U_Y = 1.0 / (np.sqrt(2)) * np.asarray([[1.0, -1j], [1.0, 1j]])
    for j in range(hi.size):
        if basis[j] == "X":
            localop *= nk.operator.LocalOperator(hi, U_X, [j])
        if basis[j] == "Y":
            localop *= nk.operator.LocalOperator(hi, U_Y, [j])
    return localop


def generate(N, bases, n_shots, seed):
    g = nk.graph.Hypercube(length=N, n_dim=1, pbc=False)
    hi = nk.hilbert.Spin(1 / 2, N=g.n_nodes)
    ha = nk.operator.Ising(hilbert=hi, h=1, graph=g)
    # the example's lanczos_ed starts ARPACK from a random vector: its
    # ground state differs in the last digits between runs; numpy's is exact
    psi = np.linalg.eigh(ha.to_dense())[1][:, 0]
    np.random.seed(seed)
    rotations, training_samples, training_bases = [], [], []
    for m, basis in enumerate(bases):
        rotation = build_rotation(hi, basis)
        p = np.square(np.absolute(rotation.to_sparse().dot(psi)))
        p /= np.sum(p)
        for rn in np.random.choice(hi.n_states, p=p, size=n_shots):
            training_samples.append(hi.numbers_to_states(rn))
        training_bases += [m] * n_shots
        rotations.append(rotation)
    rotations = np.array(rotations)[np.array(training_bases)]
    return hi, rotations, np.array(training_samples).astype(np.float32), ha, psi


def infidelity(psi1, psi2):
    return 1 - np.abs(np.conj(psi1) @ psi2) ** 2


N = 3
n_shots = 20
hi, rotations, training_samples, ha, psi = generate(N, list(product("XYZ", repeat=N)), n_shots, seed=1234)

ma = nk.models.RBM(alpha=1, param_dtype=complex)
sa = nk.sampler.MetropolisLocal(hi, n_chains=16)
op = nk.optimizer.Adam(learning_rate=0.01)
vs = nk.vqs.MCState(sa, ma, n_samples=256, n_discard_per_chain=16, seed=5, sampler_seed=6)

qsr = nkx.QSR(
    training_data=(training_samples, rotations),
    training_batch_size=50,
    optimizer=op,
    variational_state=vs,
    control_variate_update_freq=4,
    chunk_size=97,
    seed=7,
)
qsr = nkserde.checkpointed(qsr, out / "ckpt", every=2)  # the added line


def callback(step, logvals, driver):
    logvals["Infidelity"] = infidelity(psi, driver.state.to_array(normalize=True))
    return True


qsr.run(n_iter=12, callback=callback, out=nk.logging.JsonLog(str(out / "log")))
print("finished", flush=True)
