"""The coordination protocols (nkserde.processes.coordination) with hundreds of
simulated processes: threads against an in-process key-value store with a
modelled round trip. The same code runs over JAX's coordination service in
tests/test_distributed.py (real processes, P <= 8); here P goes to 1024,
counts are exact and the modelled time is bounded."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from simulated_store import SimulatedStore, simulate
from nkserde.loading.file_info import info, verify
from nkserde.loading.load import load_state_dict
from nkserde.saving.line import new_meta
from nkserde.processes.coordination import Group, StopFlag
from nkserde.errors import DistributedSaveError, PeerLostError, ProcessMismatchError
from nkserde.format.writer import write_file, write_file_together
from nkserde.types.placement import GlobalArray, PerProcess, Primary


@pytest.mark.parametrize("size", [64, 256, 1024])
def test_a_round_costs_each_process_a_constant_and_the_coordinator_3p(size):
    def work(rank, store):
        group = Group(store, rank, size, "round", timeout=30)
        first = group.round(str(rank).encode(), lambda ms: str(sum(int(m) for m in ms)).encode(), what="adding")
        second = group.round(b"", lambda ms: str(len(ms)).encode(), what="counting")
        return int(first), int(second)

    results, counts, store, _ = simulate(size, work)
    assert results == [(size * (size - 1) // 2, size)] * size
    for rank, c in enumerate(counts):
        # set, barrier, get; process 0: set, barrier, dir_get, set (+ delete of the first round's keys)
        expected = {"set": 2, "barrier": 2, "get": 2} if rank else {"set": 4, "barrier": 2, "dir_get": 2, "delete": 1}
        assert c.requests == expected, rank
    assert store.counts.total == 2 * (3 * size + 1) + 1
    # process 0 received every message once, the others their answers only
    assert counts[1].received < 50 and counts[0].received > size * 9
    assert [k for k in store.keys() if "/0/" in k] == []  # the first round's keys are gone


def test_an_error_decided_on_process_0_is_raised_everywhere():
    def work(rank, store):
        group = Group(store, rank, 8, "fail", timeout=30)

        def decide(messages):
            raise ProcessMismatchError("process 3 differs at state/x")

        try:
            group.round(b"", decide, what="checking")
        except ProcessMismatchError as exc:
            return str(exc)

    results, *_ = simulate(8, work)
    assert results == ["process 3 differs at state/x"] * 8


def test_a_process_that_never_arrives_is_named_within_the_timeout():
    size, dead = 16, 5

    def work(rank, store):
        if rank == dead:
            return None  # killed before the round
        try:
            Group(store, rank, size, "dead", timeout=0.5).round(b"x", lambda ms: b"", what="writing blocks")
        except PeerLostError as exc:
            return exc

    results, *_ = simulate(size, work)
    for rank, exc in enumerate(results):
        if rank != dead:
            assert isinstance(exc, PeerLostError) and exc.missing == [dead], (rank, exc)
            assert "process 5 did not reach 'writing blocks' within 0 s" in str(exc) or "within 1 s" in str(exc)


def test_process_0_that_dies_after_the_barrier_is_named():
    def work(rank, store):
        group = Group(store, rank, 4, "dead0", timeout=0.3)
        if rank == 0:
            store.set("nkserde/dead0/0/in/0000000", b"")
            store.barrier("nkserde/dead0/0/arrived", 5)
            return None  # dies before answering
        try:
            group.round(b"", None, what="publishing")
        except PeerLostError as exc:
            return exc.missing

    results, *_ = simulate(4, work)
    assert results[1:] == [[0]] * 3


def lockstep_run(size, signalled, at_step, *, background, steps=20):
    """``size`` simulated processes stepping in lockstep (a threading
    barrier stands for each step's collective); process ``signalled`` gets
    a signal after ``at_step`` steps. Returns the step each one stopped at."""
    collective = threading.Barrier(size, timeout=10)  # a process that runs on alone breaks it

    def work(rank, store):
        flag = StopFlag(store, "nkserde/stop", background=background)
        try:
            for completed in range(steps):
                requested = 15 if (rank == signalled and completed >= at_step) else None
                if flag.check(completed, requested):
                    return completed
                try:
                    collective.wait()  # the step's collective
                except threading.BrokenBarrierError:
                    return ("broken", completed)
            return None
        finally:
            flag.close()

    results, counts, store, _ = simulate(size, work)
    return results, counts


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("signalled", [0, 7, 63])
def test_a_signal_to_one_process_stops_all_at_the_same_step(background, signalled):
    results, counts = lockstep_run(64, signalled, 5, background=background)
    slack = 2 if background else 1
    assert results == [5 + slack] * 64
    # before the stop, one non-blocking read per process per step (the signalled process: one set)
    for rank, c in enumerate(counts):
        assert c.total <= 5 + slack + 1, (rank, c.requests)


def test_no_signal_costs_one_read_per_step():
    results, counts = lockstep_run(32, signalled=-1, at_step=0, background=True, steps=10)
    assert results == [None] * 32
    assert all(c.requests == {"try_get": 10} for c in counts)


def distributed_tree(rank, size, *, replicated=None):
    """A VMC-like state: parameters (replicated), chains spread over the
    processes (4 each), a per-process generator state."""
    rng = np.random.default_rng(rank)
    return {
        "parameters": {"w": np.arange(24.0).reshape(4, 6) if replicated is None else replicated},
        "chains": GlobalArray(
            shape=(4 * size, 8),
            dtype=np.dtype(np.int8),
            blocks=(((4 * rank, 0), np.full((4, 8), rank % 100, np.int8)),),
        ),
        "rng": PerProcess(rng.integers(0, 2**31, 4)),
        "step": 7,
    }


@pytest.mark.parametrize("size", [64, 256])
def test_a_file_written_by_hundreds_of_simulated_processes(tmp_path, size):
    path = tmp_path / "big.nks"
    meta = new_meta({}, "dict")

    def work(rank, store):
        group = Group(store, rank, size, "save", timeout=60)
        return write_file_together(path, distributed_tree(rank, size), meta, group)

    _, counts, store, modelled = simulate(size, work, SimulatedStore(size, rtt=500e-6, service=20e-6))
    assert verify(path)["process_count"] == size  # every checksum holds
    state = load_state_dict(path)
    chains = state["chains"]
    np.testing.assert_array_equal(chains[:, 0], np.repeat(np.arange(size) % 100, 4))
    assert len(state["rng"].values) == size
    np.testing.assert_array_equal(state["rng"].values[3], np.random.default_rng(3).integers(0, 2**31, 4))
    # three rounds: constant per process, about 9P at the coordinator
    assert all(c.total == 9 for c in counts[1:]) and counts[0].total == 14
    assert store.counts.total == 9 * (size - 1) + 14
    assert modelled < 1.0  # the modelled coordination of a save, not a timing of this machine
    assert not [p for p in tmp_path.iterdir() if p.name != "big.nks"]


def stored_objects(rank: int) -> dict:
    """A state dict of stored objects: one met twice at two versions, one in
    a per-process value, one in process 0's record (which a save by several
    processes encodes after the rest)."""
    return {
        "driver": {"@type": "Driver", "@version": 2, "state": {"@type": "State", "@version": 1, "w": np.ones(3)}},
        "log": Primary({"@type": "Logger", "@version": 3, "rows": np.zeros(2)}),
        "rng": PerProcess({"@type": "Generator", "@version": 1, "key": np.full(2, rank)}),
        "again": {"@type": "State", "@version": 4},
    }


def test_the_metadata_lists_the_stored_types_as_the_writer_meets_them(tmp_path):
    """A file's ``types``: read off the tree as the writer encodes it, each
    type in its first place with its last version; by several processes,
    process 0's records are encoded (and listed) last."""
    one = write_file(tmp_path / "one.nks", stored_objects(0), new_meta({}, "dict"))
    assert list(info(one)["types"].items()) == [("Driver", 2), ("State", 4), ("Logger", 3), ("Generator", 1)]
    meta = new_meta({}, "dict")

    def work(rank, store):
        group = Group(store, rank, 4, "save", timeout=60)
        return write_file_together(tmp_path / "four.nks", stored_objects(rank), meta, group)

    simulate(4, work)
    assert list(info(tmp_path / "four.nks")["types"].items()) == [
        ("Driver", 2), ("State", 4), ("Generator", 1), ("Logger", 3)
    ]  # fmt: skip


def test_simulated_processes_that_disagree_are_named(tmp_path):
    path = tmp_path / "bad.nks"
    meta = new_meta({}, "dict")

    def work(rank, store):
        group = Group(store, rank, 32, "save", timeout=60)
        tree = distributed_tree(rank, 32, replicated=np.full(3, 1.0 if rank != 17 else 2.0))
        try:
            write_file_together(path, tree, meta, group)
        except ProcessMismatchError as exc:
            return str(exc)

    results, counts, *_ = simulate(32, work)
    assert all("parameters/w" in r and "process 17" in r and "differs" in r for r in results), results[0]
    assert not path.exists() and not list(tmp_path.iterdir())
    # one more round, for the details of the one that differs
    assert all(c.total == 6 for c in counts[1:])


def test_a_failure_on_one_simulated_process_is_raised_on_all(tmp_path):
    path = tmp_path / "fail.nks"
    meta = new_meta({}, "dict")

    def work(rank, store):
        group = Group(store, rank, 16, "save", timeout=60)
        tree = distributed_tree(rank, 16)
        if rank == 9:
            tree["bad"] = object()  # cannot be encoded
        try:
            write_file_together(path, tree, meta, group)
        except DistributedSaveError as exc:
            return type(exc).__name__, str(exc)
        except Exception as exc:
            return type(exc).__name__, str(exc)

    results, *_ = simulate(16, work)
    kind, text = results[9]  # its own error: what cannot be stored, and where
    assert kind == "UnregisteredTypeError" and "bad" in text, results[9]
    for rank, (kind, text) in enumerate(results):
        if rank != 9:
            assert kind == "DistributedSaveError" and "process 9 while encoding the state" in text, (rank, text)
    assert not path.exists()


def test_a_failing_coordination_service_is_an_nkserde_error():
    """The store itself failing (JAX's service answers UNAVAILABLE when
    process 0, which serves it, is gone) is a DistributedSaveError naming
    the step, not the service's own exception."""

    class Gone:
        def set(self, key, value):
            raise RuntimeError("UNAVAILABLE: failed to connect to all addresses")

    with pytest.raises(DistributedSaveError, match="coordination service failed while writing blocks.*UNAVAILABLE"):
        Group(Gone(), 1, 2, "gone", timeout=1).round(b"", None, what="writing blocks")
