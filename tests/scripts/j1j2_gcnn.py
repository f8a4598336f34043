"""A NetKet user's script in the shape of NetKet's Examples/HeisenbergJ1J2
(J1-J2 Heisenberg model, a GCNN over the lattice's symmetries, SR, then a
second driver for an excited state started from the ground state's
parameters), shrunk to an 8-site chain, seeds fixed, with one
``nkserde.checkpointed`` line per driver, both into one directory.

    python j1j2_gcnn.py WORKDIR
"""

import sys
from pathlib import Path

import netket as nk

import nkserde

out = Path(sys.argv[1])
L = 8

lattice = nk.graph.Chain(L, max_neighbor_order=2)
hi = nk.hilbert.Spin(s=1 / 2, total_sz=0, N=lattice.n_nodes)
H = nk.operator.Heisenberg(hilbert=hi, graph=lattice, J=[1.0, 0.5])
machine = nk.models.GCNN(symmetries=lattice, parity=1, layers=1, features=2, param_dtype=complex)
sampler = nk.sampler.MetropolisExchange(hilbert=hi, n_chains=8, graph=lattice, d_max=2)
opt = nk.optimizer.Sgd(learning_rate=0.02)
sr = nk.optimizer.SR(diag_shift=0.01)
vstate = nk.vqs.MCState(
    sampler=sampler, model=machine, n_samples=64, n_discard_per_chain=0, chunk_size=4096, seed=1, sampler_seed=2
)
gs = nk.driver.VMC(H, opt, variational_state=vstate, preconditioner=sr)
gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
gs.run(n_iter=8, out=str(out / "ground_state"), show_progress=False)

saved_params = vstate.parameters
machine = nk.models.GCNN(symmetries=lattice, parity=-1, layers=1, features=2, param_dtype=complex)
vstate = nk.vqs.MCState(
    sampler=sampler, model=machine, n_samples=64, n_discard_per_chain=0, chunk_size=4096, seed=3, sampler_seed=4
)
vstate.parameters = saved_params
gs = nk.driver.VMC(H, opt, variational_state=vstate, preconditioner=sr)
gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
gs.run(n_iter=6, out=str(out / "excited_state"), show_progress=False)
print("finished", flush=True)
