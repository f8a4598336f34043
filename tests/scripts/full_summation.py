"""NetKet's Examples/FullSummation/ising.py (an exact FullSumState, VMC
with SR whose diagonal shift follows an optax schedule) on 8 sites, fewer
steps, seeds fixed, with a JsonLog instead of ``out=None``, one
``nkserde.checkpointed`` line.

    python full_summation.py WORKDIR
"""

import sys
from pathlib import Path

import netket as nk
import optax

import nkserde

out = Path(sys.argv[1])

g = nk.graph.Hypercube(length=8, n_dim=1, pbc=True)
hi = nk.hilbert.Spin(s=1 / 2, N=g.n_nodes)
ha = nk.operator.Ising(hilbert=hi, graph=g, h=1.0)
ma = nk.models.RBM(alpha=1, param_dtype=float)
op = nk.optimizer.Sgd(learning_rate=0.1)
sr = nk.optimizer.SR(diag_shift=optax.linear_schedule(0.1, 0.01, 10))
vs = nk.vqs.FullSumState(hi, ma, seed=1)
gs = nk.driver.VMC(ha, op, variational_state=vs, preconditioner=sr)
gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
gs.run(n_iter=12, out=str(out / "ising"), show_progress=False)
print("finished", flush=True)
