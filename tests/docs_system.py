"""The small system the documentation's Python snippets run against
(tests/test_docs.py runs each page's snippets in order, in a namespace of
their own made by :func:`namespace`, in an empty directory): the names the
snippets use for what a user's script has built, and the files they read.

An 8-site Ising chain, an RBM of alpha 1, 64 samples: a step takes
milliseconds, so a snippet's ``run(300)`` does too.
"""

import shutil
from pathlib import Path

import flax.serialization
import netket as nk
import netket.experimental as nkx
import numpy as np
import optax

import nkserde

FIXTURES = Path(__file__).parent / "fixtures"


def namespace() -> dict:
    """Fresh objects under the names the snippets use, and in the current
    directory the files they read: a driver's file ``gs.nks``; NetKet's own
    ``state.mpack`` (an MCState by flax) and ``old_run.mpack`` (what
    JsonLog(save_params=True) writes); ``old.nks``, a file of an older
    nkserde (a fixture)."""
    hi = nk.hilbert.Spin(0.5, 8)
    graph = nk.graph.Chain(8)
    H = nk.operator.Ising(hi, graph, h=1.0)
    model = nk.models.RBM(alpha=1, param_dtype=float)
    sampler = nk.sampler.MetropolisLocal(hi, n_chains=8)

    def build_driver():
        """The driver of tests/fixtures' "vmc_adam" scenario, so that an old
        fixture file of it loads and migrates into this template."""
        vs = nk.vqs.MCState(sampler, model, n_samples=64, seed=0, sampler_seed=1, n_discard_per_chain=2)
        return nk.driver.VMC(H, optax.adam(1e-2), variational_state=vs)

    solver = nkx.dynamics.RK4(dt=0.05)
    H1 = nk.operator.Ising(hi, graph, h=0.5)  # a quench
    gs = build_driver()
    names = {
        "__name__": "__main__",
        "nk": nk,
        "nkx": nkx,
        "nkserde": nkserde,
        "np": np,
        "hi": hi,
        "graph": graph,
        "H": H,
        "H1": H1,
        "model": model,
        "sampler": sampler,
        "opt": nk.optimizer.Sgd(0.01),
        "solver": solver,
        "hs": [1.0, 1.5],  # a sweep
        "build_driver": build_driver,
        "driver": build_driver(),
        "gs": gs,
        "vs": gs.state,
        "vs_template": build_driver().state,
        "log": nk.logging.RuntimeLog(),
        "te": nkx.TDVP(H1, variational_state=build_driver().state, ode_solver=solver),
    }
    nkserde.save(build_driver(), "gs.nks")
    Path("state.mpack").write_bytes(flax.serialization.to_bytes(names["vs_template"]))
    Path("old_run.mpack").write_bytes(flax.serialization.to_bytes(names["vs_template"].variables))
    shutil.copy(FIXTURES / "nkserde-ea7de03" / "vmc_adam.nks", "old.nks")
    return names
