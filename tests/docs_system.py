"""The small system the documentation's Python snippets run against
(tests/test_docs.py runs each page's snippets in order, in one new process
in an empty directory, after ``from docs_system import *``): the names the
snippets use for what a user's script has built, and the files they read.

An 8-site Ising chain, an RBM of alpha 1, 64 samples: a step takes
milliseconds, so a snippet's ``run(1000)`` does too.
"""

import shutil
from pathlib import Path

import flax.serialization
import netket as nk
import netket.experimental as nkx
import numpy as np  # noqa: F401  (snippets use np)
import optax

import nkserde

hi = nk.hilbert.Spin(0.5, 8)
graph = nk.graph.Chain(8)
H = nk.operator.Ising(hi, graph, h=1.0)
H1 = nk.operator.Ising(hi, graph, h=0.5)  # a quench
model = nk.models.RBM(alpha=1, param_dtype=float)
sampler = nk.sampler.MetropolisLocal(hi, n_chains=8)
opt = nk.optimizer.Sgd(0.01)
solver = nkx.dynamics.RK4(dt=0.05)
hs = [1.0, 1.5]  # a sweep


def build_driver():
    """The driver of tests/fixtures' "vmc_adam" scenario, so that an old
    fixture file of it loads and migrates into this template."""
    vs = nk.vqs.MCState(sampler, model, n_samples=64, seed=0, sampler_seed=1, n_discard_per_chain=2)
    return nk.driver.VMC(H, optax.adam(1e-2), variational_state=vs)


driver = build_driver()
gs = build_driver()
vs = gs.state
vs_template = build_driver().state
log = nk.logging.RuntimeLog()
te = nkx.TDVP(H1, variational_state=build_driver().state, ode_solver=solver)

# The files the snippets read: a driver's file; NetKet's own .mpack files (an
# MCState by flax, the parameters JsonLog(save_params=True) writes); an old
# nkserde file (a fixture of an older release)
nkserde.save(build_driver(), "gs.nks")
with open("state.mpack", "wb") as f:
    f.write(flax.serialization.to_bytes(vs_template))
with open("old_run.mpack", "wb") as f:
    f.write(flax.serialization.to_bytes(vs_template.variables))  # as JsonLog writes its .mpack
shutil.copy(Path(__file__).parent / "fixtures" / "nkserde-ea7de03" / "vmc_adam.nks", "old.nks")
