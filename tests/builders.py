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

import nkserde

N = 8


def system():
    graph = nk.graph.Chain(N)
    hilbert = nk.hilbert.Spin(0.5, N=N)
    return graph, hilbert, nk.operator.Ising(hilbert, graph, h=1.0)


def mc_state(sampler=None, model=None, n_samples=64, seed=0, sampler_seed=1, **kw):
    _, hilbert, _ = system()
    sampler = sampler or nk.sampler.MetropolisLocal(hilbert, n_chains=8)
    model = model or nk.models.RBM(alpha=1, param_dtype=float)
    return nk.vqs.MCState(
        sampler, model, n_samples=n_samples, seed=seed, sampler_seed=sampler_seed, n_discard_per_chain=2, **kw
    )


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


def monitor_chain():
    """optax's own _monitoring_test: SGD with momentum, ``optax.monitor`` (a
    gradient norm and its moving average), a clip. ``monitor``'s init
    returns empty measurements; its first update fills them."""
    return optax.chain(
        optax.sgd(1e-2, momentum=0.9),
        optax.monitor(
            {
                "norm_before_clip": optax.tree.norm,
                "norm_before_clip_ema": optax.measure_with_ema(optax.tree.norm, decay=0.9),
            }
        ),
        optax.clip_by_global_norm(1.0),
    )


def vmc_monitor():
    """VMC with :func:`monitor_chain`: its optimizer state is provisional."""
    _, _, H = system()
    return nk.driver.VMC(H, monitor_chain(), variational_state=mc_state())


def vmc_numpy_complex(sampler=None, param_dtype=complex):
    """VMC with a numpy sampler (16 chains) and an RBM of ``param_dtype``:
    for a complex model the sampler state is provisional (NetKet allocates
    log_prob complex, its first reset makes it real)."""
    _, hilbert, H = system()
    sampler = (sampler or nk.sampler.MetropolisLocalNumpy)(hilbert, n_chains=16)
    state = mc_state(sampler=sampler, model=nk.models.RBM(alpha=1, param_dtype=param_dtype))
    return nk.driver.VMC(H, optax.sgd(1e-2), variational_state=state)


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
        if isinstance(x, nkserde.types.placement.PerProcess):
            return walk(x.value)
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


def assert_differs(a, b):
    """The template really differs from the original (else "not mutated" and
    "restored" would prove nothing)."""
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    assert any(
        (isinstance(x, np.ndarray) and x.tobytes() != y.tobytes()) or (not isinstance(x, np.ndarray) and x != y)
        for x, y in zip(la, lb)
    )


def assert_same_leaves(la, lb):
    """Bit-for-bit equality of two lists made by :func:`leaves`: arrays by
    dtype, shape and bytes, scalars by type and value (NaN equals NaN)."""
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tobytes() == y.tobytes()
        else:
            assert type(x) is type(y) and (x == y or (x != x and y != y))


def assert_identical(a, b):
    """Bit-for-bit equality of two objects' state dicts."""
    assert_same_leaves(leaves(a), leaves(b))


def assert_unchanged(before, obj):
    """``before`` is ``leaves(obj)`` taken earlier (e.g. before a load that
    must not mutate its template)."""
    assert_same_leaves(before, leaves(obj))


def params_bytes(driver):
    return [np.asarray(p).tobytes() for p in jax.tree_util.tree_leaves(driver.state.parameters)]


# Crashes and resumes ------------------------------------------------------------


# NetKet 3.21 has no callback API (and nkserde no Checkpoint there)
if hasattr(nk.callbacks, "AbstractCallback"):

    class CrashAt(nk.callbacks.AbstractCallback):
        """Raises at the start of step ``at``, like a job killed between steps."""

        at: int = nk.utils.struct.field(pytree_node=False, serialize=False)

        def __init__(self, at):
            self.at = at

        def on_step_start(self, step, log_data, driver):
            if driver.step_count == self.at:
                raise RuntimeError(f"crash at {self.at}")

    class KillAt(nk.callbacks.AbstractCallback):
        """Raises in the middle of step ``at`` (its update computed, not
        applied): the Checkpoint cannot save half a step, so the run ends
        with the checkpoint before it its newest, as after a SIGKILL."""

        at: int = nk.utils.struct.field(pytree_node=False, serialize=False)

        def __init__(self, at):
            self.at = at

        def before_parameter_update(self, step, log_data, driver):
            if driver.step_count == self.at:
                raise RuntimeError(f"killed at {self.at}")


def crash_then_resume(build, directory, n_steps, crash_at, make_out=lambda: None, **options):
    """A driver from ``build()`` runs ``n_steps`` with a Checkpoint in
    ``directory`` and crashes at the start of step ``crash_at``; a second
    driver from ``build()`` runs the same call and resumes. Returns (the
    resumed driver, its logger from ``make_out()``, its Checkpoint)."""
    import pytest

    import nkserde

    with pytest.raises(RuntimeError, match="crash"):
        build().run(
            n_steps,
            out=make_out(),
            show_progress=False,
            callback=[nkserde.Checkpoint(directory, **options), CrashAt(crash_at)],
        )
    ckpt = nkserde.Checkpoint(directory, **options)
    driver, out = build(), make_out()
    driver.run(n_steps, out=out, show_progress=False, callback=ckpt)
    return driver, out, ckpt


# Added for tests/test_resume.py ------------------------------------------------


def infidelity(target="mc", **kw):
    """Infidelity_SR fitting the usual RBM MCState to a target RBM built with
    another seed: an MCState (target="mc", own sampler) or a FullSumState."""
    _, hilbert, _ = system()
    if target == "mc":
        tgt = mc_state(seed=5, sampler_seed=7)
    else:
        tgt = nk.vqs.FullSumState(hilbert, nk.models.RBM(alpha=1, param_dtype=float), seed=3)
    # NetKet 3.21 has it in netket.experimental.driver
    cls = getattr(nk.driver, "Infidelity_SR", None) or nkx.driver.Infidelity_SR
    return cls(tgt, optax.sgd(1e-2), variational_state=mc_state(), diag_shift=0.1, **kw)


def steady_state(n_sites=3, preconditioner=None):
    """SteadyState of a dissipative transverse-field Ising ring (sigma^- jumps),
    NDM density matrix, MCMixedState with a sampler for its diagonal."""
    hilbert = nk.hilbert.Spin(0.5, N=n_sites)
    ham = nk.operator.LocalOperator(hilbert)
    jumps = []
    for i in range(n_sites):
        ham += nk.operator.spin.sigmax(hilbert, i)
        ham += nk.operator.spin.sigmaz(hilbert, i) @ nk.operator.spin.sigmaz(hilbert, (i + 1) % n_sites)
        jumps.append(nk.operator.spin.sigmam(hilbert, i))
    lind = nk.operator.LocalLiouvillian(ham, jumps)
    vs = nk.vqs.MCMixedState(
        nk.sampler.MetropolisLocal(lind.hilbert, n_chains=8),
        nk.models.NDM(),
        sampler_diag=nk.sampler.MetropolisLocal(hilbert, n_chains=8),
        n_samples=64,
        n_samples_diag=64,
        seed=0,
        sampler_seed=1,
        n_discard_per_chain=2,
    )
    kw = {} if preconditioner is None else {"preconditioner": preconditioner}
    return nk.driver.SteadyState(lind, optax.sgd(1e-2), variational_state=vs, **kw)


# one initializer object, so that models built by different calls compare equal
# and JAX reuses its compiled functions across drivers
_INIT_0_3 = jax.nn.initializers.normal(0.3)


def tdvp_imag(integrator="RK4", schmitt=False, exact=True, dt=0.01, driver_kw=None, **kw):
    """Imaginary-time TDVP of the Ising chain. The RBM starts from weights of
    standard deviation 0.3 (not ~0.01), so the energy visibly moves at every
    step and the adaptive integrators reject and resize steps. ``kw`` go to
    the integrator, ``driver_kw`` to the driver."""
    _, hilbert, H = system()
    model = nk.models.RBM(
        alpha=1, param_dtype=float, kernel_init=_INIT_0_3, hidden_bias_init=_INIT_0_3, visible_bias_init=_INIT_0_3
    )
    if exact:
        vs = nk.vqs.FullSumState(hilbert, model, seed=0)
    else:
        vs = mc_state(model=model, n_samples=64)
    solver = getattr(nkx.dynamics, integrator)(dt=dt, **kw)
    cls = nkx.driver.TDVPSchmitt if schmitt else nkx.TDVP
    return cls(H, variational_state=vs, ode_solver=solver, propagation_type="imag", **(driver_kw or {}))


def json_differences(got, want, path="") -> list[str]:
    """Where two JsonLog documents differ, value for value (types included),
    except the ``wallclock`` times, which only need the same count."""
    problems: list[str] = []
    if isinstance(want, dict) and isinstance(got, dict):
        if got.keys() != want.keys():
            problems.append(f"{path}: keys {sorted(got)} != {sorted(want)}")
        for key in want.keys() & got.keys():
            if path == "/wallclock" and key == "value":
                if len(got[key]) != len(want[key]):
                    problems.append(f"{path}/value: {len(got[key])} entries, reference {len(want[key])}")
                continue
            problems += json_differences(got[key], want[key], f"{path}/{key}")
    elif got != want or type(got) is not type(want):
        problems.append(f"{path}: {got!r} != reference {want!r}")
    return problems


def assert_same_leaf_types(loaded, template):
    """Same pytree structure (NamedTuple classes, tuple vs list, dict key
    order) and, leaf by leaf, JAX arrays where the template has JAX arrays
    and numpy where it has numpy, with equal dtypes and shapes."""
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(template)
    for a, t in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(template)):
        assert type(a) is type(t)
        if isinstance(t, (np.ndarray, np.generic, jax.Array)):
            assert a.dtype == t.dtype and np.shape(a) == np.shape(t)
        if isinstance(t, jax.Array):
            assert a.weak_type == t.weak_type


def round_trip(obj, template, path):
    """save + load, and state_dict + from_state_dict; checks both against
    ``obj`` and that the template was not mutated. Returns the loaded object."""
    before = leaves(template)
    nkserde.save(obj, path)
    loaded = nkserde.load(template, path)
    in_memory = nkserde.from_state_dict(template, nkserde.state_dict(obj))
    for out in (loaded, in_memory):
        assert type(out) is type(template)
        assert_identical(obj, out)
    assert_unchanged(before, template)
    return loaded


def rewrite_header(path, change):
    """Rewrites the header of the nkserde file at ``path`` with
    ``change(header)`` (in place) and a valid checksum: what a damaged or
    hostile writer can produce."""
    import msgpack

    from nkserde.format.checksum import checksum
    from nkserde.format.layout import TRAILER

    data = path.read_bytes()
    offset, length, _, end = TRAILER.unpack(data[-TRAILER.size :])
    header = msgpack.unpackb(data[offset : offset + length], raw=False)
    change(header)
    raw = msgpack.packb(header, use_bin_type=True)
    path.write_bytes(data[:offset] + raw + TRAILER.pack(offset, len(raw), checksum(raw), end))
