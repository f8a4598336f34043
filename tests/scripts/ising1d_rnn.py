"""NetKet's Examples/Autoregressive/ising1d_rnn.py (an LSTM autoregressive
model sampled directly, VMC with SR) on 8 sites, a smaller network, fewer
steps, seeds fixed, one ``nkserde.checkpointed`` line.

    python ising1d_rnn.py WORKDIR
"""

import sys
from pathlib import Path

import netket as nk
import netket.experimental as nkx

import nkserde

out = Path(sys.argv[1])

g = nk.graph.Hypercube(length=8, n_dim=1, pbc=True)
hi = nk.hilbert.Spin(s=1 / 2, N=g.n_nodes)
ha = nk.operator.Ising(hilbert=hi, graph=g, h=1)
ma = nkx.models.FastLSTMNet(hilbert=hi, layers=1, features=4)
sa = nk.sampler.ARDirectSampler(hi)
op = nk.optimizer.Sgd(learning_rate=0.1)
sr = nk.optimizer.SR(diag_shift=0.01)
vs = nk.vqs.MCState(sa, ma, n_samples=64, seed=1, sampler_seed=2)
gs = nk.driver.VMC(ha, op, variational_state=vs, preconditioner=sr)
gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
gs.run(n_iter=10, out=str(out / "test"), show_progress=False)
print("finished", flush=True)
