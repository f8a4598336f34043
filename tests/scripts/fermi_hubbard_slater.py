"""NetKet's Examples/Fermions/fermi_hubbard_slater.py (a 2x2 Fermi-Hubbard
lattice, a Slater determinant of complex orbitals sampled by fermion hops,
VMC with holomorphic SR), fewer samples and steps, seeds fixed, the plot
left out, one ``nkserde.checkpointed`` line.

    python fermi_hubbard_slater.py WORKDIR
"""

import sys
from pathlib import Path

import netket as nk

import nkserde

out = Path(sys.argv[1])

g = nk.graph.Hypercube(length=2, n_dim=2, pbc=True)
hi = nk.hilbert.SpinOrbitalFermions(g.n_nodes, s=1 / 2, n_fermions_per_spin=(2, 2))
ham = nk.operator.FermiHubbardJax(hi, t=1, U=0.01, graph=g)
sa = nk.sampler.MetropolisFermionHop(hi, graph=g, n_chains=16, spin_symmetric=True, sweep_size=16)
ma = nk.models.Slater2nd(hi, param_dtype=complex)
vs = nk.vqs.MCState(sa, ma, n_discard_per_chain=10, n_samples=128, seed=1, sampler_seed=2)
opt = nk.optimizer.Sgd(learning_rate=0.01)
sr = nk.optimizer.SR(diag_shift=0.1, holomorphic=True)
gs = nk.driver.VMC(ham, opt, variational_state=vs, preconditioner=sr)
gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
gs.run(10, out=str(out / "fermions_test"), show_progress=False)
print("finished", flush=True)
