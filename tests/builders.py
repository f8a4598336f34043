"""Tiny NetKet set-ups shared by the tests: 8-site Ising chain, RBM alpha=1.

Each builder returns a *fresh* object built the same way every time, as a
user script does; ``run(driver, n)`` runs n steps (or a duration for the
dynamics drivers) and returns the logged loss values."""

from __future__ import annotations

import jax
import netket as nk
import netket.experimental as nkx
import numpy as np
import optax

N = 8


def system():
    graph = nk.graph.Chain(N)
    hilbert = nk.hilbert.Spin(0.5, N=N)
    return graph, hilbert, nk.operator.Ising(hilbert, graph, h=1.0)


def mc_state(sampler=None, model=None, n_samples=64, seed=0, sampler_seed=1, **kw):
    _, hilbert, _ = system()
    sampler = sampler or nk.sampler.MetropolisLocal(hilbert, n_chains=8)
    model = model or nk.models.RBM(alpha=1, param_dtype=float)
    return nk.vqs.MCState(sampler, model, n_samples=n_samples, seed=seed,
                          sampler_seed=sampler_seed, n_discard_per_chain=2, **kw)


def full_sum_state():
    _, hilbert, _ = system()
    return nk.vqs.FullSumState(hilbert, nk.models.RBM(alpha=1, param_dtype=float), seed=0)


def vmc(preconditioner=None):
    _, _, H = system()
    kw = {} if preconditioner is None else {"preconditioner": preconditioner}
    return nk.driver.VMC(H, optax.adam(1e-2), variational_state=mc_state(), **kw)


def vmc_sr(**kw):
    _, _, H = system()
    return nk.driver.VMC_SR(H, optax.sgd(1e-2), variational_state=mc_state(), diag_shift=0.1, **kw)


def tdvp(integrator="RK4", schmitt=False, exact=True, **kw):
    _, hilbert, H = system()
    vs = full_sum_state() if exact else mc_state(n_samples=128)
    solver = getattr(nkx.dynamics, integrator)(dt=0.01, **kw)
    cls = nkx.driver.TDVPSchmitt if schmitt else nkx.TDVP
    return cls(H, variational_state=vs, ode_solver=solver)


def run(driver, amount, loss="Energy"):
    """Runs the driver and returns the logged loss means as a float array."""
    log = nk.logging.RuntimeLog()
    driver.run(amount, out=log, show_progress=False)
    data = log.data
    key = loss if loss in data else next(iter(data))
    return np.asarray(data[key]["Mean"] if "Mean" in data[key] else data[key]["value"])


def leaves(obj):
    """Numpy copies of every array leaf of ``obj``'s nkserde state dict."""
    import nkserde

    out = []

    def walk(x):
        if isinstance(x, dict):
            for k in sorted(x):
                walk(x[k])
        elif isinstance(x, list):
            for v in x:
                walk(v)
        elif isinstance(x, np.ndarray):
            out.append(np.array(x))
        else:
            out.append(x)

    walk(nkserde.state_dict(obj))
    return out


def assert_identical(a, b):
    """Bit-for-bit equality of two objects' state dicts."""
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tobytes() == y.tobytes()
        else:
            assert x == y or (x != x and y != y)


def params_bytes(driver):
    return [np.asarray(p).tobytes() for p in jax.tree_util.tree_leaves(driver.state.parameters)]
