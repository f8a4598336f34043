"""A NetKet user's script in the shape of NetKet's Examples/Infidelity
(Infidelity_SR fitting a state to H|target>: NetKet builds a target whose
model state holds the operator), shrunk to an 8-site chain, seeds fixed,
the plot replaced by saving the logged infidelity, with one
``nkserde.checkpointed`` line.

    python infidelity.py WORKDIR
"""

import sys
from pathlib import Path

import netket as nk
import numpy as np

import nkserde

out = Path(sys.argv[1])

g = nk.graph.Chain(8)
hi = nk.hilbert.Spin(s=1 / 2, N=g.n_nodes)
H = nk.operator.Ising(hi, graph=g, h=1.0)
sa = nk.sampler.MetropolisLocal(hi, n_chains=8)
ma = nk.models.RBM(alpha=1)
vs_target = nk.vqs.MCState(sampler=sa, model=ma, n_samples=64, seed=1, sampler_seed=2)
vs = nk.vqs.MCState(sampler=sa, model=ma, n_samples=64, seed=3, sampler_seed=4)

optimizer = nk.optimizer.Sgd(learning_rate=0.01)
driver = nk.driver.Infidelity_SR(vs_target, optimizer, operator=H, variational_state=vs, diag_shift=0.0001)
driver = nkserde.checkpointed(driver, out / "ckpt", every=2)  # the added line
log = nk.logging.RuntimeLog()
driver.run(10, out=log, show_progress=False)

np.savez(
    out / "result.npz",
    infidelity=np.asarray(log.data["Infidelity"]["Mean"]),
    iters=np.asarray(log.data["Infidelity"].iters),
    **{f"p{i}": np.asarray(x) for i, x in enumerate(__import__("jax").tree_util.tree_leaves(vs.parameters))},
)
print("finished", flush=True)
