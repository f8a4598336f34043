"""State that its library builds provisionally and completes at the first
step, by enumeration of the installed optax and NetKet.

A template is built as the script builds it, before any step. Where a
library builds a value that its first step restructures (``optax.monitor``
returns an empty dict from ``init`` and fills it at the first update; a
numpy sampler's first reset makes a complex ``log_prob`` real), a freshly
built template cannot have the structure of the file; nkserde's rule
(``Registration.provisional``, docs/schema.md "Provisional state") takes
the template's value after its own first step instead.

Enumerated here, cheaply (structures only: ``jax.eval_shape`` where it
traces, a real reset of the numpy samplers):

* every optimizer and wrapper that optax (``optax``, ``optax.transforms``,
  ``optax.contrib``, ``optax.schedules``) and ``nk.optimizer`` export and
  that can be built from the argument table below, plus every wrapper
  around a provisional inner optimizer and the chain of optax's own
  monitoring test, over real, complex and mixed-dtype parameters: the state
  of ``init`` against the state after one ``update``;
* every sampler configuration of NetKet's test/sampler (8 sites or fewer)
  with a real and a complex model (AR models as NetKet's, particles with a
  Gaussian): the sampler state NetKet builds against the state after its
  first reset.

Every difference is loaded through the rule (the state after a real first
step into a freshly built template, bit for bit), and the differences found
must be the ones recorded below: a new optax or NetKet release that adds
one fails here until it is recorded (and described in docs/schema.md).
``python tests/test_first_steps.py`` prints the table.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import netket as nk
import netket.experimental as nkx
import numpy as np
import optax
import pytest

import nkserde
from builders import assert_same_leaves, leaves
from nkserde.loading import provisional_fields, walk as tree
from nkserde.types import registry
from nkserde.errors import TemplateMismatchError
from nkserde.netket.optimizers import after_one_update

# --------------------------------------------------------------------------- structures


def structure(x) -> tuple:
    """What a load compares of a pytree: its tree structure (NamedTuple
    classes, dict keys, None) and each leaf's shape and dtype."""
    values, treedef = jax.tree_util.tree_flatten(x)
    return treedef, tuple((tuple(np.shape(v)), str(getattr(v, "dtype", type(v).__name__))) for v in values)


def weak_types(x) -> tuple:
    return tuple(bool(getattr(v, "weak_type", False)) for v in jax.tree_util.tree_leaves(x))


def differences(before, after) -> list[str]:
    """Where two pytrees differ in structure, shape or dtype, as
    ``path: before -> after`` (the whole tree where the structures differ)."""
    (t0, l0), (t1, l1) = structure(before), structure(after)
    if t0 != t1:
        paths0 = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(before)]
        paths1 = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(after)]
        return [f"structure: leaves {sorted(set(paths1) - set(paths0))} appear, {sorted(set(paths0) - set(paths1))} go"]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(before)]
    return [f"{p}: {a[1]}{list(a[0])} -> {b[1]}{list(b[0])}" for p, a, b in zip(paths, l0, l1) if a != b]


# --------------------------------------------------------------------------- optax


def _parameters():
    rng = np.random.default_rng(0)
    return {
        # a NetKet model's parameters: all real, all complex, or a mix
        "real": {"w": jnp.asarray(rng.normal(size=(4, 3))), "b": jnp.asarray(rng.normal(size=3))},
        "complex": {
            "w": jnp.asarray(rng.normal(size=(4, 3)) + 1j * rng.normal(size=(4, 3))),
            "b": jnp.asarray(rng.normal(size=3) + 1j * rng.normal(size=3)),
        },
        "mixed": {
            "w": jnp.asarray(rng.normal(size=(4, 3))),
            "b": jnp.asarray(rng.normal(size=3).astype(np.float32)),
            "c": jnp.asarray(rng.normal(size=2) + 1j * rng.normal(size=2)),
        },
    }


PARAMETERS = _parameters()


def _is_matrix(params):
    return jax.tree_util.tree_map(lambda x: x.ndim > 1, params)


def _labels(params):
    return jax.tree_util.tree_map(lambda x: "matrix" if x.ndim > 1 else "vector", params)


def _monitor():
    # optax's own _monitoring_test: a gradient norm and its moving average
    return optax.monitor(
        {
            "norm_before_clip": optax.tree.norm,
            "norm_before_clip_ema": optax.measure_with_ema(optax.tree.norm, decay=0.9),
        }
    )


def _inner():
    return optax.adam(1e-2)


# Values for the required arguments of optax's factories, by name. A factory
# annotated as returning a transformation whose required arguments are not
# all here fails test_every_optax_transformation_is_built.
ARGUMENTS = {
    "learning_rate": lambda: 1e-2,
    "clipping": lambda: 0.1,
    "eta": lambda: 0.01,
    "gamma": lambda: 0.55,
    "seed": lambda: 0,
    "max_consecutive_errors": lambda: 2,
    "should_transform_fn": lambda: lambda step: step % 2 == 0,
    "should_update_fn": lambda: lambda step: step % 2 == 0,  # maybe_update (optax 0.2.2)
    "max_delta": lambda: 1.0,
    "threshold": lambda: 1.0,
    "max_norm": lambda: 1.0,
    "l2_norm_clip": lambda: 1.0,
    "noise_multiplier": lambda: 0.1,
    "decay": lambda: 0.9,
    "sync_period": lambda: 2,
    "slow_step_size": lambda: 0.5,
    "mask": lambda: _is_matrix,
    "freeze_mask": lambda: _is_matrix,
    "param_labels": lambda: _labels,
    "measure": lambda: optax.tree.norm,
    "measure_name": lambda: "norm",
    "measures": lambda: {"norm": optax.tree.norm},
    "max_backtracking_steps": lambda: 3,
    "max_linesearch_steps": lambda: 3,
    "step_size_fn": lambda: optax.exponential_decay(1.0, 2, 0.5),
    "step_size": lambda: 0.1,
    "every_k_schedule": lambda: 2,
    "f": lambda: lambda updates, params: updates,
    "inner_factory": lambda: optax.adam,
    # wrappers: an inner optimizer (and, for each, a variant around a
    # provisional one, see optax_cases)
    "inner": _inner,
    "opt": _inner,
    "optimizer": _inner,
    "fast_optimizer": _inner,
    "base_optimizer": _inner,
    "adv_optimizer": lambda: optax.sgd(1e-2),
    "transforms": lambda: {"matrix": optax.adam(1e-2), "vector": optax.sgd(1e-2)},
}
WRAPPED = ("inner", "opt", "optimizer", "fast_optimizer", "base_optimizer")
# (optax.transforms and optax.schedules are not in every optax nkserde supports)
NAMESPACES = tuple(
    m
    for m in (optax, getattr(optax, "transforms", None), optax.contrib, getattr(optax, "schedules", None), nk.optimizer)
    if m
)


def _exported(module):
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    return sorted(n for n in names if not n.startswith("_"))


def _returns_transformation(fn) -> bool:
    annotation = inspect.signature(fn).return_annotation
    return isinstance(annotation, type) and issubclass(annotation, optax.GradientTransformation)


def optax_factories() -> tuple[dict, dict]:
    """({name: (factory, required argument names)}, {name: missing
    arguments}) of every function (and class with an ``init``: MultiSteps)
    the namespaces export, each once, under its first public name; the
    second holds the functions annotated as returning a transformation that
    the argument table cannot build."""
    found, unbuildable, seen = {}, {}, set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optax's deprecated aliases
        for module in NAMESPACES:
            for name in _exported(module):
                fn = getattr(module, name, None)
                is_class = inspect.isclass(fn) and callable(getattr(fn, "init", None)) and not issubclass(fn, tuple)
                if not (inspect.isfunction(fn) or is_class) or id(fn) in seen:
                    continue
                seen.add(id(fn))
                try:
                    parameters = inspect.signature(fn).parameters.values()
                except (TypeError, ValueError):
                    continue
                required = [
                    p.name
                    for p in parameters
                    if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_KEYWORD,)
                ]
                qualified = f"{module.__name__}.{name}"
                if any(p.kind == p.VAR_POSITIONAL for p in parameters):
                    continue  # chain, named_chain: built below
                missing = [a for a in required if a not in ARGUMENTS]
                if missing:
                    if not is_class and _returns_transformation(fn):
                        unbuildable[qualified] = missing
                    continue
                found[qualified] = (fn, required)
    return found, unbuildable


def optax_cases() -> dict[str, optax.GradientTransformation]:
    """Every buildable transformation, by name; ``[around monitor]`` the
    wrappers around optax.monitor's chain; compositions by hand."""
    cases = {}
    factories, _ = optax_factories()
    provisional_inner = _monitor if hasattr(optax, "monitor") else None
    for name, (fn, required) in factories.items():
        variants = {name: {a: ARGUMENTS[a]() for a in required}}
        wrapped = [a for a in required if a in WRAPPED]
        if wrapped and provisional_inner is not None:
            variants[f"{name}[around monitor]"] = dict(variants[name], **{a: provisional_inner() for a in wrapped})
        for label, kwargs in variants.items():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = fn(**kwargs)
                    if name.endswith("inject_hyperparams") or name.endswith("inject_stateful_hyperparams"):
                        out = out(learning_rate=1e-2)
            except Exception:  # a utility that takes these names but is no optimizer
                continue
            if isinstance(out, optax.GradientTransformation) or (
                callable(getattr(out, "init", None)) and callable(getattr(out, "update", None))
            ):
                cases[label] = out
    cases["optax.chain(adam, clip)"] = optax.chain(optax.scale_by_adam(), optax.clip_by_global_norm(1.0))
    cases["optax.named_chain(clip, adam)"] = optax.named_chain(
        ("clip", optax.clip_by_global_norm(1.0)), ("adam", _inner())
    )
    if provisional_inner is not None:
        # optax's _monitoring_test: SGD with momentum, monitor, clip
        cases["optax.chain(sgd momentum, monitor, clip)"] = optax.chain(
            optax.sgd(1e-2, momentum=0.9), _monitor(), optax.clip_by_global_norm(1.0)
        )
        cases["optax.named_chain(monitor)"] = optax.named_chain(("monitor", _monitor()), ("sgd", optax.sgd(1e-2)))
    return cases


def _loss(params):
    return sum(jnp.sum(jnp.abs(x) ** 2) for x in jax.tree_util.tree_leaves(params))


def _gradients(params):
    rng = np.random.default_rng(1)
    return jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape)).astype(p.dtype), params)


# What a NetKet driver passes: update(gradients, state, parameters). Some
# optax transformations need more (the loss value, its function): with
# these they are enumerated, but no NetKet driver can run them.
EXTRA_ARGUMENTS = ("value", "grad", "value_fn")


@dataclasses.dataclass
class OptaxFinding:
    case: str
    parameters: str
    usable: bool  # its update runs as a NetKet driver calls it
    changes: list  # structure, shape or dtype: what a load compares
    updates: int  # how many updates change them
    weak_type_changes: bool  # only the weak type of leaves (a load keeps the template's)
    failure: str = ""  # why init or update cannot run with these parameters


GRADIENTS = {kind: _gradients(params) for kind, params in PARAMETERS.items()}


def _first_updates(opt, kind):
    """(the states of init and of each update until one no longer changes
    the structure, the state after the first update, whether the updates
    ran as a NetKet driver calls them), traced, not computed."""
    params, grads = PARAMETERS[kind], GRADIENTS[kind]
    states = [jax.eval_shape(opt.init, params)]
    usable, first = True, None
    for _ in range(provisional_fields.MAX_FIRST_STEPS):
        try:
            after = jax.eval_shape(lambda g, s, p: opt.update(g, s, p)[1], grads, states[-1], params)
        except Exception as exc:
            extra = {"value": _loss(params), "grad": grads, "value_fn": _loss}
            try:
                after = jax.eval_shape(lambda g, s, p: opt.update(g, s, p, **extra)[1], grads, states[-1], params)
            except Exception:
                raise exc from None  # the error of the update as a driver calls it
            usable = False
        first = after if first is None else first
        if not differences(states[-1], after):
            return states, first, usable
        states.append(after)
    raise AssertionError(f"{kind} parameters: the state still changes after {len(states) - 1} updates")


@functools.lru_cache(maxsize=None)
def optax_findings() -> tuple[OptaxFinding, ...]:
    out = []
    for case, opt in optax_cases().items():
        for kind in PARAMETERS:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    states, first, usable = _first_updates(opt, kind)
            except Exception as exc:
                failure = f"{type(exc).__name__}: {' '.join(str(exc).split())[:100]}"
                out.append(OptaxFinding(case, kind, False, [], 0, False, failure))
                continue
            changes = differences(states[0], states[-1])
            weak = not changes and weak_types(states[0]) != weak_types(first)
            out.append(OptaxFinding(case, kind, usable, changes, len(states) - 1, weak))
    return tuple(out)


# The cases whose state changes structure or dtype at its first updates,
# {parameter kind: how many updates change it}, recorded per optax release:
# 0.2.8 (the main test run's), 0.2.2 (nkserde's floor). Another release is
# compared with the newest record: a release that adds one fails here.
ALL = ("real", "complex", "mixed")
PROVISIONAL_OPTAX = {
    "0.2.8": {
        # init: measurements={}; the first update fills one entry per measure
        # (optax.transforms.monitor is the same function)
        "optax.monitor": dict.fromkeys(ALL, 1),
        "optax.chain(sgd momentum, monitor, clip)": dict.fromkeys(ALL, 1),
        "optax.named_chain(monitor)": dict.fromkeys(ALL, 1),
        # hyperparameters, learning-rate estimates, then accumulators take the
        # parameters' result dtype (complex128 over mixed parameters)
        "optax.inject_hyperparams": {"mixed": 1},
        "optax.schedules.inject_stateful_hyperparams": {"mixed": 1},
        "optax.contrib.dog": {"mixed": 1},
        "optax.contrib.dowg": {"mixed": 1},
        "optax.contrib.dadapt_adamw": {"mixed": 2},
        "optax.contrib.prodigy": {"mixed": 2},
        # their update needs the loss: no NetKet driver can run them
        "optax.contrib.momo": {"mixed": 1},
        "optax.contrib.momo_adam": {"mixed": 1},
    },
    "0.2.2": {
        # nu starts as a Python float per leaf; the update makes it an array
        # of the gradient's dtype
        "optax.novograd": {"mixed": 1},
        "optax.scale_by_novograd": {"mixed": 1},
        # float64 accumulators become complex128 for complex parameters
        "optax.contrib.cocob": {"complex": 1, "mixed": 1},
        # float32 accumulators take the parameters' dtype
        "optax.contrib.dadapt_adamw": {"real": 1, "complex": 1, "mixed": 2},
        "optax.contrib.prodigy": {"real": 1, "complex": 1, "mixed": 2},
    },
}


def _recorded_optax() -> dict:
    def release(v):
        return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())

    version = optax.__version__ if optax.__version__ in PROVISIONAL_OPTAX else max(PROVISIONAL_OPTAX, key=release)
    return PROVISIONAL_OPTAX[version]


def _found_optax():
    """{case: {parameter kind: updates}} of the provisional optax states
    found; the wrappers around a provisional inner state are left out (they
    are provisional because what they wrap is)."""
    found: dict[str, dict] = {}
    for f in optax_findings():
        if f.changes and "[around monitor]" not in f.case:
            found.setdefault(f.case, {})[f.parameters] = f.updates
    return found


def test_every_optax_transformation_is_built():
    """Every factory optax and nk.optimizer export that returns a
    transformation is built (a new one with an argument the table lacks
    fails here), and the enumeration is not vacuous."""
    _, unbuildable = optax_factories()
    assert not unbuildable, f"add values for these arguments to ARGUMENTS: {unbuildable}"
    cases = optax_cases()
    assert len(cases) > 50, sorted(cases)
    for name in ("optax.adam", "optax.sgd", "optax.MultiSteps", "optax.masked", "netket.optimizer.Adam"):
        assert name in cases, name


def test_the_provisional_optax_states_are_the_recorded_ones():
    found = _found_optax()
    expected = {k: v for k, v in _recorded_optax().items() if k in optax_cases()}
    new = {k: v for k, v in found.items() if expected.get(k) != v}
    gone = {k: v for k, v in expected.items() if k not in found}
    assert not new and not gone, (
        f"optax states that change structure at their first update, not as recorded (record them in "
        f"PROVISIONAL_OPTAX and docs/schema.md): new or changed {new}; no longer {gone}"
    )
    # every wrapper of a provisional state is provisional too: the rule
    # sees the whole state, whatever wraps it
    for f in optax_findings():
        if f.case.endswith("[around monitor]") and not f.failure:
            assert f.changes, f


@dataclasses.dataclass
class Run:
    """What a NetKet driver holds of its optimizer: the optimizer (the
    template's configuration), its state and the parameters."""

    optimizer: Any
    state: Any
    params: Any


def _run_registration():
    # the rule as the drivers declare it (nkserde/netket/drivers.py)
    nkserde.register(
        Run,
        name="tests.first_steps.Run",
        to_state=lambda r: {"optimizer_state": r.state},
        from_state=lambda t, f: dataclasses.replace(t, state=f["optimizer_state"]),
        fields=("optimizer_state",),
        provisional={"optimizer_state": lambda r, state: after_one_update(r.optimizer, state, r.params)},
    )


@pytest.fixture
def run_registered():
    saved = registry.snapshot()
    _run_registration()
    yield
    registry.restore(saved)


# optax's inject_hyperparams casts complex moments to real parameters' dtypes
# with jnp's astype, so JAX attributes the warning to its own module: filtered
# here, in optax's updates of this test, not for nkserde's code elsewhere
@pytest.mark.filterwarnings("ignore:Casting from complex to real dtypes will soon raise:DeprecationWarning")
def test_every_provisional_optax_state_loads_into_a_fresh_template(run_registered, tmp_path):
    """The state after real updates (one more than change its structure)
    loads into the freshly initialised state of the same optimizer, bit for
    bit, for every usable case found; the drivers declare the same rule."""
    cases = optax_cases()
    checked = 0
    for f in optax_findings():
        # (a wrapper around monitor: once, its inner state is the same for all kinds)
        if not (f.changes and f.usable) or ("[around monitor]" in f.case and f.parameters != "real"):
            continue
        opt, params = cases[f.case], PARAMETERS[f.parameters]
        update = opt.update  # op by op: nothing to compile
        state = opt.init(params)
        for _ in range(f.updates + 1):
            state = update(GRADIENTS[f.parameters], state, params)[1]
        stepped, fresh = Run(opt, state, params), Run(opt, opt.init(params), params)
        try:  # the template alone refuses the file, or loads it with its own (wrong) types
            alone = tree.from_state_dict(fresh.state, nkserde.state_dict(state))
            assert structure(alone) != structure(state), f.case
        except TemplateMismatchError:
            pass
        loaded = nkserde.from_state_dict(fresh, nkserde.state_dict(stepped))
        assert structure(loaded.state) == structure(state), f.case
        assert_same_leaves(leaves(loaded), leaves(stepped))
        checked += 1
    assert checked > 0
    # through a file too, for the case of the issue
    case = cases.get("optax.chain(sgd momentum, monitor, clip)")
    if case is not None:
        params = PARAMETERS["complex"]
        state = case.update(GRADIENTS["complex"], case.init(params), params)[1]
        nkserde.save(Run(case, state, params), tmp_path / "run.nks")
        loaded = nkserde.load(Run(case, case.init(params), params), tmp_path / "run.nks")
        assert_same_leaves(leaves(loaded.state), leaves(state))


def test_every_optimization_driver_declares_its_optimizer_state_provisional():
    regs = [reg for reg in registry.registrations().values() if reg.fields and "optimizer_state" in reg.fields]
    assert len(regs) >= 4, [r.name for r in regs]
    for reg in regs:
        assert "optimizer_state" in reg.provisional, reg.name


# --------------------------------------------------------------------------- samplers


def _sampler_configurations():
    """NetKet's test/sampler/test_sampler.py configurations, 8 sites or fewer."""
    g = nk.graph.Chain(8)
    hi = nk.hilbert.Spin(0.5, 8)
    ising = nk.operator.Ising(hi, g, h=1.0)
    hi_spin1 = nk.hilbert.Spin(1, 4)
    fock_1 = nk.hilbert.Fock(n_max=1, N=8, n_particles=1)
    fock = nk.hilbert.Fock(n_max=3, N=4)
    fermions = nk.hilbert.SpinOrbitalFermions(4, n_fermions=2)
    spinful = nk.hilbert.SpinOrbitalFermions(4, s=1 / 2, n_fermions_per_spin=(2, 2))
    particles = nkx.hilbert.Particle(N=2, geometry=nkx.geometry.FreeSpace(d=1))
    tensor = nk.hilbert.Spin(0.5, 4) * nk.hilbert.Fock(3)
    sx = sum(nk.operator.spin.sigmax(hi, i) for i in range(8))
    sx4 = sum(nk.operator.spin.sigmax(nk.hilbert.Spin(0.5, 4), i) for i in range(4))
    S, R, c = nk.sampler, nk.sampler.rules, dict(n_chains=8)
    return {
        "Exact: Spin": lambda: S.ExactSampler(hi),
        "Exact: Fock": lambda: S.ExactSampler(fock),
        "Metropolis(Local): Spin": lambda: S.MetropolisLocal(hi, **c),
        "Metropolis(Local): Spin-chunked": lambda: S.MetropolisLocal(hi, chunk_size=4, **c),
        "MetropolisNumpy(Local): Spin": lambda: S.MetropolisLocalNumpy(hi, **c),
        "MetropolisNumpy(Local): Spin-chunked": lambda: S.MetropolisLocalNumpy(hi, chunk_size=4, **c),
        "MetropolisPT(Local): Spin": lambda: S.ParallelTemperingLocal(hi, n_chains=4, n_replicas=4),
        "MetropolisPT(Local): Fock": lambda: S.ParallelTemperingLocal(fock, n_chains=4, n_replicas=4),
        "Metropolis(Exchange): Fock-1particle": lambda: S.MetropolisExchange(fock_1, graph=g, **c),
        "Metropolis(Exchange, Prob): Fock-1particle": lambda: S.MetropolisExchange(
            fock_1, graph=g, d_max=2, probabilities=[1.0, 0.5], **c
        ),
        "Metropolis(Hamiltonian, numba operator): Spin": lambda: S.MetropolisHamiltonian(
            hi, hamiltonian=ising, reset_chains=True, **c
        ),
        "Metropolis(Hamiltonian, jax operator): Spin": lambda: S.MetropolisHamiltonian(
            hi, hamiltonian=nk.operator.IsingJax(hi, g, h=1.0), reset_chains=True, **c
        ),
        "Metropolis(ParticleExchange): SpinOrbitalFermions": lambda: S.MetropolisFermionHop(
            fermions, graph=nk.graph.Chain(4), **c
        ),
        "Metropolis(ParticleExchange, spinful): SpinOrbitalFermions": lambda: S.MetropolisFermionHop(
            spinful, graph=nk.graph.Chain(4), spin_symmetric=True, **c
        ),
        "MetropolisNumpy(Hamiltonian): Spin": lambda: S.MetropolisHamiltonianNumpy(
            hi, hamiltonian=ising.to_local_operator(), reset_chains=True, **c
        ),
        "MetropolisNumpy(Custom: Sx): Spin": lambda: S.MetropolisCustom(hi, move_operators=sx, **c),
        "Metropolis(MultipleRules[Local, Local]): Spin": lambda: S.MetropolisSampler(
            hi, R.MultipleRules([R.LocalRule(), R.LocalRule()], [0.8, 0.2]), **c
        ),
        "Metropolis(MultipleRules[Local, Hamiltonian]): Spin": lambda: S.MetropolisSampler(
            hi, R.MultipleRules([R.LocalRule(), R.HamiltonianRule(ising)], [0.8, 0.2]), **c
        ),
        "Autoregressive: Spin 1/2": lambda: S.ARDirectSampler(hi),
        "Autoregressive: Spin 1": lambda: S.ARDirectSampler(hi_spin1),
        "Autoregressive: Fock": lambda: S.ARDirectSampler(fock),
        "Metropolis(Gaussian): particles": lambda: S.MetropolisGaussian(particles, sigma=1.0, **c),
        "Metropolis(AdjustedLangevin): particles": lambda: S.MetropolisAdjustedLangevin(particles, dt=0.1, **c),
        "Metropolis(AdjustedLangevin, chunked): particles": lambda: S.MetropolisAdjustedLangevin(
            particles, dt=0.1, chunk_size=4, **c
        ),
        "Metropolis(TensorRule[Local, Local]): Spin x Fock": lambda: S.MetropolisSampler(
            tensor, R.TensorRule(tensor, [R.LocalRule(), R.LocalRule()]), **c
        ),
        "Metropolis(TensorRule[Hamiltonian, Local]): Spin x Fock": lambda: S.MetropolisSampler(
            tensor, R.TensorRule(tensor, [R.HamiltonianRule(sx4), R.LocalRule()]), **c
        ),
    }


SAMPLERS = _sampler_configurations()


def _models(sampler) -> dict:
    hilbert = sampler.hilbert
    if isinstance(sampler, nk.sampler.ARDirectSampler):
        return {
            kind: functools.partial(nk.models.ARNNDense, hilbert=hilbert, layers=1, features=2, param_dtype=dtype)
            for kind, dtype in (("real", float), ("complex", complex))
        }
    if isinstance(hilbert, nkx.hilbert.Particle):
        return {"real": functools.partial(nk.models.Gaussian, param_dtype=float)}
    return {
        kind: functools.partial(nk.models.RBM, alpha=1, param_dtype=dtype)
        for kind, dtype in (("real", float), ("complex", complex))
    }


def stored(sampler_state) -> dict:
    """The fields nkserde stores of a sampler state, as a pytree whose
    leaves are (shape, dtype) or a type name."""
    reg = registry.lookup(type(sampler_state))
    fields = {k: tree._unwrap(v) for k, v in reg.to_state(sampler_state).items()}

    def leaf(x):
        return (tuple(x.shape), str(x.dtype)) if hasattr(x, "shape") and hasattr(x, "dtype") else type(x).__name__

    return jax.tree_util.tree_map(leaf, fields)


def _stored_differences(before, after) -> list[str]:
    a, b = stored(before), stored(after)
    if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
        return [f"structure: {a} -> {b}"]
    out = []
    for (path, x), y in zip(
        jax.tree_util.tree_leaves_with_path(a, is_leaf=lambda v: isinstance(v, tuple)),
        jax.tree_util.tree_leaves(b, is_leaf=lambda v: isinstance(v, tuple)),
    ):
        if x != y:
            out.append(f"{jax.tree_util.keystr(path)}: {x} -> {y}")
    return out


@functools.lru_cache(maxsize=None)
def sampler_findings() -> tuple[tuple[str, str, tuple], ...]:
    """(configuration, model kind, stored differences between the state
    NetKet builds and the state after its first reset) for every case.
    Traced with jax.eval_shape where NetKet's reset traces; the numpy
    samplers (and ExactSampler, whose reset does not trace) run it."""
    out = []
    key = jax.random.key(0)
    for name, build in SAMPLERS.items():
        try:
            sampler = build()
        except TypeError:  # an argument this NetKet does not have (probabilities: NetKet 3.22)
            continue
        for kind, model in _models(sampler).items():
            model = model()
            x = jnp.zeros((1, sampler.hilbert.size), sampler.dtype)
            abstract = jax.eval_shape(model.init, jax.random.key(1), x)
            try:
                state = jax.eval_shape(lambda v: sampler.init_state(model, v, key), abstract)
                after = jax.eval_shape(lambda v, s: sampler.reset(model, v, s), abstract, state)
            except Exception:  # numpy, or not traceable: run it
                variables = model.init(jax.random.key(1), x)
                state = sampler.init_state(model, variables, key)
                after = sampler.reset(model, variables, copy.deepcopy(state))
            out.append((name, kind, tuple(_stored_differences(state, after))))
    return tuple(out)


# Recorded under NetKet 3.21 to 3.23: the numpy samplers allocate log_prob with the
# model's output dtype (complex for a complex model) and their first reset
# makes it real (netket/sampler/metropolis_numpy.py).
PROVISIONAL_SAMPLERS = {
    ("MetropolisNumpy(Local): Spin", "complex"): ("['log_prob']: ((8,), 'complex128') -> ((8,), 'float64')",),
    ("MetropolisNumpy(Local): Spin-chunked", "complex"): ("['log_prob']: ((8,), 'complex128') -> ((8,), 'float64')",),
    ("MetropolisNumpy(Hamiltonian): Spin", "complex"): ("['log_prob']: ((8,), 'complex128') -> ((8,), 'float64')",),
    ("MetropolisNumpy(Custom: Sx): Spin", "complex"): ("['log_prob']: ((8,), 'complex128') -> ((8,), 'float64')",),
}


def test_the_provisional_sampler_states_are_the_recorded_ones():
    found = {(name, kind): changes for name, kind, changes in sampler_findings() if changes}
    assert len(sampler_findings()) >= 45
    assert found == PROVISIONAL_SAMPLERS, (
        "sampler states that change at their first reset, not as recorded (record them in "
        f"PROVISIONAL_SAMPLERS and docs/schema.md): {found}"
    )


@pytest.mark.parametrize("name, kind", sorted(PROVISIONAL_SAMPLERS))
def test_every_provisional_sampler_state_loads_into_a_fresh_state(name, kind, tmp_path):
    """A sampled MCState (through a file) loads into a freshly built one;
    the two then sample alike."""
    model = _models(SAMPLERS[name]())[kind]

    def build():
        return nk.vqs.MCState(SAMPLERS[name](), model(), n_samples=16, n_discard_per_chain=2, seed=0, sampler_seed=1)

    stepped, fresh = build(), build()
    stepped.sample()
    stepped.reset()
    assert stored(fresh.sampler_state) != stored(stepped.sampler_state)
    nkserde.save(stepped, tmp_path / "vs.nks")
    loaded = nkserde.load(fresh, tmp_path / "vs.nks")
    assert_same_leaves(leaves(loaded), leaves(stepped))
    assert np.asarray(loaded.sample()).tobytes() == np.asarray(stepped.sample()).tobytes()


# --------------------------------------------------------------------------- the table


def table() -> str:
    lines = [
        "| case | parameters / model | changes at the first step | usable in a NetKet driver |",
        "|---|---|---|---|",
    ]
    for f in optax_findings():
        if f.changes:
            updates = "" if f.updates == 1 else f" (over {f.updates} updates)"
            lines.append(
                f"| `{f.case}` | {f.parameters} | {'; '.join(f.changes)}{updates} | {'yes' if f.usable else 'no'} |"
            )
    for f in optax_findings():
        if f.weak_type_changes:
            lines.append(f"| `{f.case}` | {f.parameters} | weak type only | {'yes' if f.usable else 'no'} |")
    for name, kind, changes in sampler_findings():
        if changes:
            lines.append(f"| {name} | {kind} | {'; '.join(changes)} | yes |")
    n_optax = len({f.case for f in optax_findings()})
    failed = sorted({(f.case, f.parameters) for f in optax_findings() if f.failure})
    lines.append("")
    lines.append(
        f"{n_optax} optax cases x {len(PARAMETERS)} parameter kinds = {len(optax_findings())}, of which "
        f"{sum(bool(f.changes) for f in optax_findings())} provisional, "
        f"{sum(f.weak_type_changes for f in optax_findings())} weak type only, {len(failed)} cannot run; "
        f"{len(sampler_findings())} sampler cases, {sum(bool(c) for *_, c in sampler_findings())} provisional"
    )
    failures = {(f.case, f.parameters): f.failure for f in optax_findings() if f.failure}
    lines += [f"cannot run: {c} ({p}): {failures[c, p]}" for c, p in failed]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
