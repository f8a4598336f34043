"""Every public NetKet class, by enumeration of the installed NetKet.

The walk covers the namespaces users build runs from. For every class found
the test fails unless it is registered under a stable name, handled by a
documented rule, or listed below with the reason it needs no registration:
a class the next NetKet adds fails here until someone decides. Every
concrete driver, variational state and sampler found must have a builder
below (a tiny system), and is saved, loaded into a template built the same
way, and continued, bit for bit against the uninterrupted object.
"""

from __future__ import annotations

import importlib
import inspect

import jax
import netket as nk
import numpy as np
import pytest

import nkserde
from nkserde.types import registry
from nkserde.saving.snapshot import check_storable

NAMESPACES = (
    "netket.driver",
    "netket.experimental",
    "netket.experimental.driver",
    "netket.sampler",
    "netket.sampler.rules",
    "netket.logging",
    "netket.callbacks",
    "netket.vqs",
    "netket.experimental.vqs",
    "netket.optimizer",
    "netket.experimental.dynamics",
    "netket.stats",
)

ABSTRACT = "an abstract base: only its subclasses are built"
RULE = (
    "configuration only: a Metropolis rule holds the moves it proposes (the sampler's state, "
    "registered, holds what a run changes); stored by the fallback as the fields NetKet marks serializable"
)
TRANSIENT = "the statistics of one step, recomputed at every step; nothing a later step reads"
LISTED = {
    "AbstractDriver": ABSTRACT,
    "AbstractDynamicsDriver": ABSTRACT,
    "AbstractOptimizationDriver": ABSTRACT,
    "AbstractVariationalDriver": ABSTRACT + " (NetKet 3.21)",
    "VariationalState": ABSTRACT,
    "VariationalMixedState": ABSTRACT,
    "AbstractLog": ABSTRACT,
    "AbstractCallback": ABSTRACT,
    "MetropolisRule": ABSTRACT,
    "Sampler": ABSTRACT,
    "SamplerState": ABSTRACT,
    "AbstractSolver": ABSTRACT + " (the Runge-Kutta tableaus are configuration)",
    "RunFinished": "an exception type",
    "StopRun": "an exception type",
    "LinearOperator": "a quantum geometric tensor: rebuilt from the state at every step",
    "LinearPreconditioner": "the base of SR: its solver is configuration, its matrix a cache rebuilt every step",
    "IntegratorState": "stored field by field by the Integrator registration (docs/schema.md)",
    "LocalEstimators": TRANSIENT,
    "LocalEstimatorsBatch": TRANSIENT,
    "OnlineStatsBatch": TRANSIENT,
    "StatsBatch": TRANSIENT,
}
for _rule in (
    "CustomRuleNumpy",
    "ExchangeRule",
    "FermionHopRule",
    "FixedRule",
    "GaussianRule",
    "GlobalSpinFlipRule",
    "HamiltonianRuleNumpy",
    "LangevinRule",
    "LocalRule",
    "LocalRuleNumpy",
    "MultipleRules",
    "TensorRule",
):
    LISTED[_rule] = RULE
# NetKet 3.21: callbacks are called as functions, not NetKet pytrees with
# hooks; only the Checkpoint stores callbacks, and it needs NetKet >= 3.22
for _callback in ("Timeout", "EarlyStopping", "ConvergenceStopping", "InvalidLossStopping", "AutoSlurmRequeue"):
    LISTED.setdefault(
        _callback,
        "NetKet 3.21's callbacks are called as functions; the Checkpoint, which stores callbacks, needs NetKet's "
        "callback hooks (3.22)",
    )
# samplers are configuration (their state is the registered sampler state);
# rule "netket.sampler" fingerprints them: docs/schema.md
SAMPLER_RULE = "netket.sampler"


def public_classes() -> dict[type, list[str]]:
    found: dict[type, list[str]] = {}
    for namespace in NAMESPACES:
        try:
            module = importlib.import_module(namespace)
        except ImportError:  # an older NetKet without it
            continue
        for name in dir(module):
            value = getattr(module, name)
            if not name.startswith("_") and inspect.isclass(value) and value.__module__.startswith("netket"):
                found.setdefault(value, []).append(f"{namespace}.{name}")
    return found


def test_every_public_class_is_registered_handled_by_a_rule_or_listed_with_a_reason():
    problems = []
    for cls, names in public_classes().items():
        reg = registry.lookup(cls)
        if cls.__name__ in LISTED and (reg is None or reg.name.startswith("netket.pytree.")):
            continue
        if reg is None:
            problems.append(f"{names[0]}: no registration")
        elif reg.name.startswith("netket.pytree."):
            problems.append(f"{names[0]}: only the fallback ({reg.name}), which stores what NetKet serializes")
    assert not problems, (
        "register these, or list them in LISTED with the reason they need no registration:\n" + "\n".join(problems)
    )


# ------------------------------------------------------------------ builders


def _builders():
    import builders
    import scenarios

    def run_steps(n):
        return lambda driver: driver.run(n, out=(), show_progress=False)

    def run_time(t):
        return lambda driver: driver.run(t, out=(), show_progress=False)

    def sample(state):
        # sampled, then reset as a driver step leaves it (what a state with
        # cached samples stores is tested in test_samplers.py)
        state.sample()
        state.reset()

    def expect_only(state):
        state.expect(builders.system()[2])

    def exact_sampler():
        _, hilbert, _ = builders.system()
        return builders.mc_state(sampler=nk.sampler.ExactSampler(hilbert))

    def ar_direct():
        _, hilbert, _ = builders.system()
        model = nk.models.ARNNDense(hilbert=hilbert, layers=1, features=2, param_dtype=float)
        return nk.vqs.MCState(nk.sampler.ARDirectSampler(hilbert), model, n_samples=16, seed=0, sampler_seed=1)

    def metropolis():
        _, hilbert, _ = builders.system()
        rule = nk.sampler.rules.LocalRule()
        return builders.mc_state(sampler=nk.sampler.MetropolisSampler(hilbert, rule, n_chains=8))

    def metropolis_numpy():
        _, hilbert, _ = builders.system()
        return builders.mc_state(sampler=nk.sampler.MetropolisLocalNumpy(hilbert, n_chains=4))

    def parallel_tempering():
        _, hilbert, _ = builders.system()
        return builders.mc_state(sampler=nk.sampler.ParallelTemperingLocal(hilbert, n_chains=4, n_replicas=4))

    return {
        # drivers: (build, advance, proceed)
        "VMC": (builders.vmc, run_steps(2), run_steps(2)),
        "VMC_SR": (builders.vmc_sr, run_steps(2), run_steps(2)),
        "SteadyState": (builders.steady_state, run_steps(2), run_steps(2)),
        "Infidelity_SR": (builders.infidelity, run_steps(2), run_steps(2)),
        "QSR": (scenarios._qsr, run_steps(3), run_steps(2)),
        "TDVP": (builders.tdvp, run_time(0.02), run_time(0.02)),
        "TDVPSchmitt": (lambda: builders.tdvp(schmitt=True, exact=False), run_time(0.02), run_time(0.02)),
        # variational states
        "MCState": (builders.mc_state, sample, sample),
        "FullSumState": (builders.full_sum_state, expect_only, expect_only),
        "MCMixedState": (lambda: builders.steady_state().state, sample, sample),
        "DeterminantVariationalState": (_determinant_state, expect_only_fermions, expect_only_fermions),
        # samplers: a state sampling with them
        "ExactSampler": (exact_sampler, sample, sample),
        "ARDirectSampler": (ar_direct, sample, sample),
        "MetropolisSampler": (metropolis, sample, sample),
        "MetropolisSamplerNumpy": (metropolis_numpy, sample, sample),
        "ParallelTemperingSampler": (parallel_tempering, sample, sample),
    }


def _determinant_state():
    import test_determinant_state

    return test_determinant_state.state()


def expect_only_fermions(state):
    import test_determinant_state

    state.expect(test_determinant_state.hubbard(state.hilbert))


# NetKet 3.21 names the base of its drivers AbstractVariationalDriver
DRIVER_BASE = getattr(nk.driver, "AbstractDriver", None) or nk.driver.AbstractVariationalDriver


def concrete(kind) -> list[str]:
    """The public concrete classes of one kind in this NetKet, by name."""
    out = []
    for cls in public_classes():
        if inspect.isabstract(cls) or cls.__name__ in LISTED:
            continue
        if kind == "driver" and issubclass(cls, DRIVER_BASE):
            out.append(cls.__name__)
        elif kind == "state" and issubclass(cls, nk.vqs.VariationalState):
            out.append(cls.__name__)
        elif kind == "sampler" and issubclass(cls, nk.sampler.Sampler):
            out.append(cls.__name__)
    return sorted(set(out))


CONCRETE = {kind: concrete(kind) for kind in ("driver", "state", "sampler")}


@pytest.mark.parametrize("kind", sorted(CONCRETE))
def test_every_concrete_driver_state_and_sampler_has_a_builder(kind):
    missing = [name for name in CONCRETE[kind] if name not in _builders()]
    assert not missing, f"add a builder (a tiny system) to tests/test_netket_coverage.py for: {missing}"


def _scalars_as_numbers(values):
    """A 0-d array as its number: NetKet makes some counters Python numbers
    in a fresh object and weakly typed 0-d JAX arrays after a step, which
    JAX treats alike (a loaded object keeps its template's kind)."""
    return [v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v for v in values]


@pytest.mark.parametrize("name", [n for kind in sorted(CONCRETE) for n in CONCRETE[kind]])
def test_saved_loaded_and_continued_as_the_uninterrupted(name, tmp_path):
    from builders import leaves

    def assert_same_leaves(a, b):
        from builders import assert_same_leaves as same

        same(_scalars_as_numbers(a), _scalars_as_numbers(b))

    build, advance, proceed = _builders()[name]
    straight, first = build(), build()
    advance(straight)
    advance(first)
    nkserde.save(first, tmp_path / "saved.nks")
    resumed = nkserde.load(build(), tmp_path / "saved.nks")
    assert_same_leaves(leaves(resumed), leaves(straight))
    proceed(straight)
    proceed(resumed)
    assert_same_leaves(leaves(resumed), leaves(straight))


# ------------------------------------------------------------------ the fallback drops nothing silently


class _Stepper(nk.utils.struct.Pytree):
    """A NetKet pytree nkserde has no registration for (as a class a later
    NetKet adds): its serializable ``weights``, and fields NetKet does not
    serialize."""

    weights: jax.Array
    _rng: object = nk.utils.struct.field(pytree_node=False, serialize=False)
    cache: jax.Array = nk.utils.struct.field(pytree_node=True, serialize=False)

    def __init__(self, rng):
        self.weights = jax.numpy.zeros(3)
        self._rng = rng
        self.cache = jax.numpy.ones(3)


def test_the_fallback_refuses_a_generator_it_would_drop():
    stepper = _Stepper(np.random.default_rng(0))
    with pytest.raises(nkserde.errors.UnregisteredTypeError) as caught:
        check_storable({"run": stepper})
    message = str(caught.value)
    assert message.startswith("run/_rng: ") and "_Stepper._rng holds a Generator" in message
    assert "Register" in message


def test_the_fallback_refuses_a_jax_key_it_would_drop():
    stepper = _Stepper(jax.random.key(0))
    with pytest.raises(nkserde.errors.UnregisteredTypeError, match="run/_rng: .*a JAX random key"):
        check_storable({"run": stepper})
    stepper = _Stepper(jax.random.PRNGKey(0))  # a raw uint32 key, named like one
    with pytest.raises(nkserde.errors.UnregisteredTypeError, match="uint32"):
        check_storable({"run": stepper})


@pytest.mark.skipif(not hasattr(nk.callbacks, "AbstractCallback"), reason="NetKet 3.21 has no callback classes")
def test_a_callback_holding_a_generator_it_would_drop_is_refused():
    class Jitter(nk.callbacks.AbstractCallback):
        _rng: object = nk.utils.struct.field(pytree_node=False, serialize=False)

        def __init__(self):
            self._rng = np.random.default_rng(0)

    expected = r"callbacks/0/_rng: .*Jitter\._rng holds a Generator"
    with pytest.raises(nkserde.errors.UnregisteredTypeError, match=expected):
        check_storable({"callbacks": [Jitter()]})


def test_the_fallback_stores_what_netket_serializes_and_leaves_configuration(tmp_path):
    stepper = _Stepper(None)  # no generator: a cache and configuration are left out
    check_storable(stepper)
    nkserde.save(stepper, tmp_path / "s.nks")
    loaded = nkserde.load(_Stepper(None), tmp_path / "s.nks")
    np.testing.assert_array_equal(loaded.weights, stepper.weights)


def coverage_table() -> str:
    """The markdown table of docs/schema.md, "Coverage": every public class of
    the installed NetKet and how nkserde handles it."""
    rows = []
    for cls, names in sorted(public_classes().items(), key=lambda item: item[1][0]):
        reg = registry.lookup(cls)
        if cls.__name__ in LISTED:
            how = LISTED[cls.__name__]
        elif reg is None:
            how = "**not handled**"
        elif reg.name == SAMPLER_RULE:
            how = "rule `netket.sampler`: configuration, fingerprinted; its state is the sampler state's registration"
        else:
            how = f"`{reg.name}`"
        built = " (saved, loaded, continued)" if cls.__name__ in _builders() else ""
        rows.append(f"| `{names[0]}` | {how}{built} |")
    return "\n".join([f"| class (NetKet {nk.__version__}) | how nkserde stores it |", "|---|---|", *rows])


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent / "fixtures")]
    print(coverage_table())
