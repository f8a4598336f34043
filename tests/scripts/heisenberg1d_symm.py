"""A NetKet user's script in the shape of NetKet's Examples/Heisenberg1d
(VMC_SR, a translation-symmetric RBMSymm, a total_sz=0 Hilbert space,
exchange sampling, ``out="test"``), shrunk to test size, seeds fixed so that
an uninterrupted run is reproducible, with two additions: the
``nkserde.checkpointed`` line, and ``nk.callbacks.Timeout`` fitting each job
into a walltime (``TIMEOUT`` seconds from the environment).

    python heisenberg1d_symm.py WORKDIR
"""

import os
import sys
from pathlib import Path

import netket as nk

import nkserde

out = Path(sys.argv[1])
L = 8

g = nk.graph.Chain(length=L, pbc=True)
hi = nk.hilbert.Spin(s=1 / 2, N=g.n_nodes, total_sz=0)
ha = nk.operator.Heisenberg(hilbert=hi, graph=g)
ma = nk.models.RBMSymm(
    symmetries=g.translation_group(), alpha=2, use_visible_bias=False, use_hidden_bias=True, param_dtype=float
)
sa = nk.sampler.MetropolisExchange(hi, graph=g, n_chains=8)
op = nk.optimizer.Sgd(learning_rate=0.01)
vs = nk.vqs.MCState(sa, ma, n_samples=64, n_discard_per_chain=4, seed=1, sampler_seed=2)
gs = nk.driver.VMC_SR(ha, op, variational_state=vs, diag_shift=0.1)

gs = nkserde.checkpointed(gs, out / "ckpt", every=4)  # the added line
gs.run(
    n_iter=20,
    out=str(out / "test"),
    show_progress=False,
    callback=nk.callbacks.Timeout(float(os.environ.get("TIMEOUT", "1e9"))),
)
print("finished" if gs.step_count == 20 else f"stopped at {gs.step_count}", flush=True)
