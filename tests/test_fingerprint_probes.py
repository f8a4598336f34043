"""The fingerprint's probes fall back where they fail the way NetKet's and
optax's objects make them fail (nkserde/checkpoint/fingerprint/), and let
any other error through: a probe that swallowed it would describe the run
by a fallback nobody asked for, silently."""

from __future__ import annotations

import netket as nk
import numpy as np
import optax
import pytest

from nkserde.checkpoint.fingerprint import operators, optimizers, walk
from nkserde.checkpoint.fingerprint.entries import CONTENT, READABLE

SPINS = nk.hilbert.Spin(0.5, N=4)
PARAMETERS = {"Dense": {"bias": np.zeros(4), "kernel": np.zeros((4, 4))}, "visible_bias": np.zeros(4)}


class Probed(nk.operator.DiscreteOperator):
    """A user's operator whose connections, property ``strength`` and term
    layout raise what they are given (None: they work)."""

    def __init__(self, hilbert, strength=1.0, conn_error=None, property_error=None, acting_on=((0,),)):
        super().__init__(hilbert)
        self._strength = strength
        self._conn_error = conn_error
        self._property_error = property_error
        self._acting_on = acting_on

    @property
    def dtype(self):
        return np.float64

    @property
    def is_hermitian(self):
        return True

    @property
    def strength(self):
        if self._property_error is not None:
            raise self._property_error
        return self._strength

    @property
    def acting_on(self):
        return self._acting_on

    @property
    def operators(self):
        return [np.array([[0.0, 1.0], [1.0, 0.0]])]

    @property
    def constant(self):
        return 0.0

    def get_conn_flattened(self, x, sections, pad=False):
        if self._conn_error is not None:
            raise self._conn_error
        sections[:] = np.arange(1, len(x) + 1)
        return np.asarray(x), np.full(len(x), self._strength)


def described(op) -> dict:
    fp: dict[str, str] = {}
    walk.describe_operator(fp, "operator", op)
    return fp


# ------------------------------------------------ a space too large to count


def test_a_space_netket_cannot_count_is_uncountable():
    """NetKet raises RuntimeError ("too large to be indexed") for 100 spins."""
    big = nk.operator.Ising(nk.hilbert.Spin(0.5, N=100), nk.graph.Chain(100), h=1.0)
    assert operators.uncountable(big)
    assert not operators.uncountable(nk.operator.Ising(SPINS, nk.graph.Chain(4), h=1.0))


def test_another_error_counting_a_space_is_not_taken_for_a_large_space(monkeypatch):
    def fails(self):
        raise KeyError("a bug in the space")

    monkeypatch.setattr(nk.hilbert.Spin, "n_states", property(fails))
    with pytest.raises(KeyError, match="a bug in the space"):
        operators.uncountable(nk.operator.Ising(SPINS, nk.graph.Chain(4), h=1.0))


# ------------------------------------------------------- an operator's action


def test_an_operator_without_connections_is_described_by_its_fields():
    """NetKet's DiscreteOperator raises NotImplementedError from
    get_conn_flattened until a subclass defines it (a RuntimeError also
    comes from numba operators under sharding): no action, the operator's
    fields decide (this class's: none NetKet declares) and its readable
    entries still name it."""
    acting = described(Probed(SPINS))
    assert operators.computed_action_digest(Probed(SPINS)) is not None
    for error in (NotImplementedError("no get_conn_flattened"), RuntimeError("only jax operators under sharding")):
        assert operators.computed_action_digest(Probed(SPINS, conn_error=error)) is None
        fp = described(Probed(SPINS, strength=2.0, conn_error=error))
        assert fp["operator"].startswith(CONTENT) and fp["operator"] != acting["operator"]
        assert fp[f"operator{READABLE}strength"] == "2.0"


def test_an_object_without_a_space_has_no_action():
    """Infidelity_SR leaves a dataclasses.Field where a driver keeps its
    operator: no space, no action, its fields describe it."""
    assert operators.computed_action_digest(object()) is None


def test_another_error_computing_an_action_is_not_swallowed():
    with pytest.raises(ZeroDivisionError):
        described(Probed(SPINS, conn_error=ZeroDivisionError("a bug in the operator")))


# ------------------------------------------------- an operator's readable entries


def test_a_property_that_cannot_be_read_is_left_out_of_the_readable_entries():
    assert described(Probed(SPINS, strength=0.5))[f"operator{READABLE}strength"] == "0.5"
    for error in (AttributeError("a field it lacks"), NotImplementedError("abstract")):
        fp = described(Probed(SPINS, property_error=error))
        assert f"operator{READABLE}strength" not in fp
        assert fp[f"operator{READABLE}kind"] == "Probed"


def test_another_error_reading_a_property_is_not_swallowed():
    with pytest.raises(ZeroDivisionError):
        described(Probed(SPINS, property_error=ZeroDivisionError("a bug in the property")))


def test_terms_of_another_layout_are_not_listed():
    """An operator with LocalOperator's attribute names whose sites are not
    site numbers: no terms (ValueError, TypeError), the kind stays."""
    assert described(Probed(SPINS))[f"operator{READABLE}term X0"] == "1.0"
    for sites in ((("first",),), ((None,),)):
        fp = described(Probed(SPINS, acting_on=sites))
        assert not [k for k in fp if f"{READABLE}term" in k], fp
        assert fp[f"operator{READABLE}kind"] == "Probed"


def test_another_error_listing_terms_is_not_swallowed():
    class Sites:
        def __iter__(self):
            raise ZeroDivisionError("a bug in the operator's sites")

    with pytest.raises(ZeroDivisionError):
        described(Probed(SPINS, acting_on=Sites()))


# ------------------------------------------------------- an optimizer's effect


def test_an_optimizer_that_needs_the_runs_structure_is_probed_on_it():
    """A mask of the run's own structure refuses the probe's tree
    (ValueError): the run's structure decides, and another mask differs."""
    masked = optax.masked(optax.adam(1e-2), {"Dense": {"bias": True, "kernel": False}, "visible_bias": True})
    other = optax.masked(optax.adam(1e-2), {"Dense": {"bias": False, "kernel": True}, "visible_bias": True})
    with pytest.raises(ValueError):
        optimizers.computed_updates(masked, {"a": (3,), "b": (2, 3)}, np.float64)
    effect = optimizers.effect(masked, PARAMETERS, [])
    assert effect is not None
    assert effect != optimizers.effect(other, PARAMETERS, [])


def test_an_optimizer_that_needs_more_arguments_is_described_instead():
    """lbfgs's update needs the loss value and gradient (TypeError): no
    effect, its description decides."""
    assert optimizers.effect(optax.lbfgs(), PARAMETERS, []) is None
    fp: dict[str, str] = {}
    walk.describe_optimizer(fp, "optimizer", optax.lbfgs(), PARAMETERS)
    assert not fp["optimizer"].startswith("effect ")
    assert fp[f"optimizer{READABLE}kind"] == "lbfgs+zoom_linesearch"


def test_another_error_of_an_optimizer_on_the_runs_structure_is_not_swallowed():
    def update(updates, state, params=None):
        raise ZeroDivisionError("a bug in the optimizer")

    broken = optax.GradientTransformation(lambda params: (), update)
    with pytest.raises(ZeroDivisionError):
        optimizers.effect(broken, PARAMETERS, [])
