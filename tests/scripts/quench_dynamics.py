"""A NetKet user's script, as NetKet's Examples/Dynamics/ising1d.py is
written (ground state by VMC, then a quench with adaptive TDVP, observables
and stopping times, both logged to JsonLog files), shrunk to test size, with
one line added per driver: ``nkserde.checkpointed(...)``.

    python quench_dynamics.py WORKDIR

Every output goes below WORKDIR. Killed at any point and run again, it must
end with the files an uninterrupted run writes.
"""

import sys
from pathlib import Path

import netket as nk
import netket.experimental as nkx
import numpy as np

import nkserde

out = Path(sys.argv[1])
L = 8

graph = nk.graph.Hypercube(length=L, n_dim=1, pbc=True)
hilbert = nk.hilbert.Spin(s=1 / 2, N=graph.n_nodes)
H = nk.operator.Ising(hilbert=hilbert, graph=graph, h=1.0)
model = nk.models.RBM(alpha=1, use_visible_bias=True, param_dtype=complex)
sampler = nk.sampler.MetropolisHamiltonian(hilbert, H, n_chains=8)
vstate = nk.vqs.MCState(sampler, model, n_samples=128, n_discard_per_chain=4, seed=1, sampler_seed=2)
Sx = sum(nk.operator.spin.sigmax(hilbert, i) for i in range(L))

# ground state: the first driver
gs = nk.driver.VMC(H, nk.optimizer.Sgd(0.01), variational_state=vstate)
gs = nkserde.checkpointed(gs, out / "ckpt", every=3)  # the added line
gs.run(n_iter=12, out=str(out / "gs"), obs={"Sx": Sx}, show_progress=False)

# quench: a second driver on the same variational state
H1 = nk.operator.Ising(hilbert=hilbert, graph=graph, h=0.5)
te = nkx.TDVP(
    H1,
    variational_state=vstate,
    ode_solver=nkx.dynamics.RK23(dt=0.01, adaptive=True, rtol=1e-3, atol=1e-3),
    t0=0.0,
    qgt=nk.optimizer.qgt.QGTJacobianDense(holomorphic=True, diag_shift=1e-4),
    error_norm="qgt",
)
te = nkserde.checkpointed(te, out / "ckpt", every=1)  # the added line (one directory)
te.run(
    T=0.03,
    out=nk.logging.JsonLog(str(out / "te")),
    obs={"Sx": Sx},
    tstops=np.linspace(0.0, 0.03, 4, endpoint=True),
    show_progress=False,
)
print("finished", flush=True)
