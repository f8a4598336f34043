"""The fingerprint's probes kept between processes (nkserde.caches.results,
keyed by nkserde.caches.content_key): a fingerprint made from kept
results is the one computed, a changed run is refused as it is without
them, what cannot be described by its content (the script's own
functions) is never kept, and a damaged file is computed again."""

from __future__ import annotations

import json

import jax.numpy as jnp
import netket as nk
import numpy as np
import optax
import pytest

from nkserde.caches import content_key, results
from nkserde.checkpoint.fingerprint import changes, fingerprint, functions, operators, optimizers

L = 6
PROBES = ((functions, "computed_call"), (optimizers, "computed_updates"), (operators, "computed_action_digest"))


def driver(J2=0.5, learning_rate=0.01, activation=None, model="gcnn"):
    """Every kind of probe: a LocalOperatorJax's action, a model's
    activations, an optimizer with a schedule."""
    graph = nk.graph.Chain(L, max_neighbor_order=2)
    hilbert = nk.hilbert.Spin(0.5, N=L, total_sz=0)
    H = nk.operator.Heisenberg(hilbert, graph, J=[1.0, J2]).to_jax_operator()
    if model == "gcnn":
        extra = {} if activation is None else {"activation": activation}
        net = nk.models.GCNN(symmetries=nk.graph.Chain(L), layers=1, features=2, param_dtype=float, **extra)
    else:
        net = nk.models.RBM(alpha=1, param_dtype=float)
    sampler = nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=4)
    vs = nk.vqs.MCState(sampler, net, n_samples=16, seed=0, sampler_seed=1)
    schedule = optax.linear_schedule(learning_rate, learning_rate / 10, 100)
    return nk.driver.VMC(H, optax.adam(schedule), variational_state=vs)


@pytest.fixture
def kept(tmp_path):
    """Results kept in tmp_path/results for the test (and none before it,
    whatever an earlier test's Checkpoint set)."""
    before = results.directory(), results._may_write
    results.use(None)
    yield tmp_path / "results"
    results.use(before[0], may_write=before[1])


def computed(**kwargs) -> dict:
    """The fingerprint without kept results."""
    before = results.directory()
    results.use(None)
    try:
        return fingerprint(driver(**kwargs))
    finally:
        results.use(before)


def no_probes(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("a probe ran: its result should have been kept")

    for module, name in PROBES:
        monkeypatch.setattr(module, name, fail)


def test_a_fingerprint_from_kept_results_is_the_one_computed(kept, monkeypatch):
    expected = computed()
    results.use(kept)
    assert fingerprint(driver()) == expected  # computed, and kept
    files = list(kept.glob("*.json"))
    assert len(files) >= 5, files  # the action, activations, schedule, updates
    with monkeypatch.context() as m:
        no_probes(m)
        assert fingerprint(driver()) == expected  # a new driver, the same script: no probe runs
    assert sorted(kept.glob("*.json")) == sorted(files)  # and nothing new is kept


@pytest.mark.parametrize(
    "change",
    [dict(J2=0.8), dict(learning_rate=0.02), dict(activation=nk.nn.log_cosh), dict(model="rbm")],
    ids=["coupling", "learning rate", "activation", "model"],
)
def test_a_changed_run_is_refused_as_without_kept_results(kept, change):
    base = computed()
    expected = changes(base, computed(**change))
    assert expected  # a change the fingerprint sees
    results.use(kept)
    assert fingerprint(driver()) == base
    assert changes(base, fingerprint(driver(**change))) == expected
    assert changes(base, fingerprint(driver(**change))) == expected  # from what the change kept


def test_the_scripts_own_functions_are_never_kept(kept):
    def mine(x):
        return x * 2

    assert content_key.key("call", mine, np.arange(3.0)) is None
    assert content_key.key("call", optax.sgd(lambda step: 0.01)) is None  # a package's closure over it
    assert content_key.key("call", type("Mine", (), {})()) is None
    assert content_key.key("call", optax.sgd(0.01)) == content_key.key("call", optax.sgd(0.01))
    assert content_key.key("call", optax.sgd(0.01)) != content_key.key("call", optax.sgd(0.02))
    assert content_key.key("call", optax.sgd(jnp.asarray(0.01))) != content_key.key("call", optax.sgd(0.01))
    assert content_key.key("call", nk.nn.log_cosh) != content_key.key("call", nk.nn.reim_selu)

    results.use(kept)
    with_mine = computed(activation=mine)
    assert fingerprint(driver(activation=mine)) == with_mine
    assert fingerprint(driver(activation=lambda x: x * 3)) != with_mine  # computed again, not taken


def test_what_fails_to_be_described_gives_no_key():
    # (content_key.key's one broad except: describing objects a script holds
    # runs their code; whatever it raises, the probe runs instead)
    deleted = jnp.arange(3.0)
    deleted.delete()
    assert content_key.key("k", deleted) is None  # np.asarray of it raises RuntimeError
    assert content_key.key("k", jnp.arange(3.0)) is not None

    class Failing(nk.hilbert.Spin):  # a slot whose descriptor raises (a C extension's state, a lazy property)
        __slots__ = ("broken",)

    Failing.__module__ = "netket.hilbert"  # a class of a package the key pins
    failing = Failing(0.5, N=4)
    Failing.broken = property(lambda self: 1 / 0)
    assert content_key.key("k", failing) is None


def test_a_cached_hash_is_not_content():
    a, b = nk.hilbert.Spin(0.5, N=4), nk.hilbert.Spin(0.5, N=4)
    hash(a)  # cached on a (another value in every process), not on b
    assert content_key.key("k", a) == content_key.key("k", b) is not None


@pytest.mark.parametrize("damage", ["truncated", "value changed", "not json", "empty", "too large", "other key"])
def test_a_damaged_result_is_computed_again(kept, monkeypatch, damage):
    expected = computed()
    results.use(kept)
    fingerprint(driver())
    files = sorted(kept.glob("*.json"))
    for i, path in enumerate(files):
        text = path.read_text()
        if damage == "truncated":
            path.write_text(text[: len(text) // 2])
        elif damage == "value changed":
            stored = json.loads(text)
            stored["value"] = {"value": "content 0000000000000000"}
            path.write_text(json.dumps(stored))
        elif damage == "not json":
            path.write_bytes(b"\x93NUMPY\x00\xff" * 10)
        elif damage == "empty":
            path.write_bytes(b"")
        elif damage == "too large":
            path.write_text(text + " " * (1 << 20))
        else:  # another key's (whole) file in its place
            path.write_text(files[(i + 1) % len(files)].read_text() if len(files) > 1 else "{}")
    assert fingerprint(driver()) == expected
    with monkeypatch.context() as m:  # and written anew: whole again
        no_probes(m)
        assert fingerprint(driver()) == expected


def test_nothing_is_kept_without_a_directory_or_where_this_process_does_not_write(kept):
    results.use(None)
    assert not results.put("k", 1) and results.get("k") is None
    results.use(kept, may_write=lambda: False)  # not process 0
    fingerprint(driver())
    assert not kept.exists()


def test_memoized_computes_once_and_again_only_where_it_must(kept):
    # the one helper around a kept computation (the fingerprint's probes,
    # nkserde.caches.operator_tables): kept once, taken after; a value its decode
    # refuses is computed again; NOT_KEPT and key None store nothing
    results.use(kept)
    runs = []

    def compute(value):
        return lambda: runs.append(value) or value

    same = lambda v: v  # noqa: E731
    assert results.memoized("k1", compute(3), same, same) == 3
    assert results.memoized("k1", compute(4), same, same) == 3 and runs == [3]
    assert results.memoized("k1", compute(5), same, lambda v: 1 / 0) == 5 and runs == [3, 5]
    assert results.memoized("k2", compute(6), lambda v: results.NOT_KEPT, same) == 6
    assert results.get("k2") is None
    assert results.memoized(None, compute(7), same, same) == 7
    assert results.memoized(None, compute(8), same, same) == 8 and runs == [3, 5, 6, 7, 8]
