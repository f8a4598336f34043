"""NetKet's Examples/Ising1d/ising1d_jastrow.py (a Jastrow ansatz, VMC_SR,
an EarlyStopping callback on the variance) on 8 sites, fewer samples and
steps, seeds fixed, one ``nkserde.checkpointed`` line.

    python ising1d_jastrow.py WORKDIR
"""

import sys
from pathlib import Path

import netket as nk
import numpy as np

import nkserde

out = Path(sys.argv[1])

g = nk.graph.Hypercube(length=8, n_dim=1, pbc=True)
hi = nk.hilbert.Spin(s=1 / 2, N=g.n_nodes)
ha = nk.operator.Ising(hilbert=hi, graph=g, h=0.0)
ma = nk.models.Jastrow(param_dtype=np.float64)
sa = nk.sampler.MetropolisLocal(hi, n_chains=16)
op = nk.optimizer.Sgd(learning_rate=0.05)
vs = nk.vqs.MCState(sa, ma, n_samples=256, n_discard_per_chain=20, seed=1, sampler_seed=2)
gs = nk.driver.VMC_SR(ha, op, variational_state=vs, diag_shift=0.01)
gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
gs.run(
    n_iter=10,
    out=str(out / "test"),
    show_progress=False,
    # stop if variance is essentially zero (= reached eigenstate)
    callback=nk.callbacks.EarlyStopping(monitor="variance", baseline=1e-12, patience=np.inf),
)
print("finished", flush=True)
