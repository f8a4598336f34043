"""Multi-process runs, with real processes: JAX's distributed runtime over
gloo on 127.0.0.1 (tests/multiprocess.py launches them; no mock of
``jax.process_count()``).

The VMC set-up has 12 chains, so 1, 2 and 3 processes split them evenly.
On the same number of processes a resume is bit-identical to the
uninterrupted run. On another number, the load itself is exact (parameters,
optimizer state, chains, key) but the run that follows sums over a
different split of the chains, so its values agree to rounding only (on
this set-up: 1e-16 absolute in the parameters after 2 more steps).

A launch of NetKet costs each process seconds of CPU: the cases that need
no fresh process run as several actions of one launch (the ``runs``
fixture); the kills, the failures and the counts have launches of their own.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import nkserde
from multiprocess import in_turn, launch

STEPS, K = 4, 2  # runs of 4 steps, saved after 2


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("jax-cache")


@pytest.fixture(scope="module")
def runs(cache, tmp_path_factory):
    """The cases that need no process of their own, in five launches (a
    launch of NetKet costs seconds of CPU per process; these cases do
    not depend on a fresh one). Each action writes its own directory
    (``root/<name>``):

    - 2 processes: uninterrupted runs of VMC and TDVP, the same runs saved
      after K steps, a numpy sampler's per-process state saved, a state
      dict restored in memory, a file of blocks saved and loaded back;
    - 1 process: the VMC saved after K steps, then the 2-process VMC file
      and numpy sampler file loaded;
    - 1 process of 4 devices: the VMC saved after K steps;
    - 2 processes, once every file exists: the 2-process files resumed,
      the 1-process file loaded and resumed, the 2-process chains loaded
      into 8 and 16, the 4-device file and the numpy sampler file loaded;
    - 3 processes: the 2-process VMC file and numpy sampler file loaded.
    """
    root = tmp_path_factory.mktemp("runs")
    file2 = {d: root / f"{d}-2.nks" for d in ("vmc", "tdvp")}
    file1, d4, numpy_file = root / "vmc-1.nks", root / "d4.nks", root / "np.nks"
    launch(
        2,
        in_turn(
            *(["straight", root / f"{d}-straight", d, STEPS] for d in ("vmc", "tdvp")),
            *(["save", root / f"{d}-save2", d, K, file2[d]] for d in ("vmc", "tdvp")),
            ["save-numpy", root / "np-saved", numpy_file],
            ["state-dict", root / "state-dict"],
            ["own-blocks", root / "own-blocks", root / "own.nks"],
        ),
        jax_cache=cache,
    )
    launch(
        1,
        in_turn(
            ["save", root / "vmc-save1", "vmc", K, file1],
            ["chains", root / "chains-on1", file2["vmc"]],
            ["load-numpy", root / "np-on1", numpy_file],
        ),
        jax_cache=cache,
    )
    flags = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    launch(1, ["save", root / "d4-save", "vmc", K, d4], jax_cache=cache, env=flags)
    launch(
        2,
        in_turn(
            *(["resume", root / f"{d}-resumed", d, K, STEPS, file2[d]] for d in ("vmc", "tdvp")),
            ["chains", root / "file1-on2", file1],
            ["resume", root / "file1-resumed-on2", "vmc", K, STEPS, file1],
            *(["chains", root / f"chains-into-{n}", file2["vmc"], n] for n in (8, 16)),
            ["chains", root / "d4-on2", d4],
            ["load-numpy", root / "np-on2", numpy_file],
        ),
        jax_cache=cache,
    )
    launch(
        3,
        in_turn(["chains", root / "chains-on3", file2["vmc"]], ["load-numpy", root / "np-on3", numpy_file]),
        jax_cache=cache,
    )
    return {
        "root": root,
        **{d: reported(root, f"{d}-straight") for d in ("vmc", "tdvp")},
        **{f"{d}-file2": file2[d] for d in ("vmc", "tdvp")},
        "vmc-file1": file1,
        "vmc-saved1": reported(root, "vmc-save1"),
        "vmc-saved-chains": reported(root, "vmc-save2")["chains"],
        "numpy-file": numpy_file,
    }


def reported(root, name):
    """What process 0 of an action reported (tests/_mp_worker.py)."""
    return np.load(root / name / "result.npz")


def of_rank(runs, name, r):
    """What process ``r`` of an action reported."""
    return np.load(runs["root"] / name / f"rank-{r}.npz")


def assert_same_run(reference, resumed):
    np.testing.assert_array_equal(resumed["losses"], reference["losses"][K:])
    params = [k for k in reference.files if k.startswith("param:")]
    assert params
    for k in params:
        np.testing.assert_array_equal(resumed[k], reference[k], err_msg=k)
    assert int(resumed["step_count"]) == int(reference["step_count"])


@pytest.mark.parametrize("driver", ["vmc", "tdvp"])
def test_two_process_file_resumes_exactly_on_two(runs, driver):
    info = nkserde.verify(runs[f"{driver}-file2"])
    assert info["process_count"] == 2
    resumed = reported(runs["root"], f"{driver}-resumed")
    assert_same_run(runs[driver], resumed)
    if driver == "tdvp":
        assert float(resumed["t"]) == float(runs[driver]["t"])


def test_global_chains_are_stored_once_as_blocks(runs):
    """The chains of a 2-process file: one [12, 8] array made of the two
    processes' blocks; parameters single entries."""
    header = nkserde.format.read_header(runs["vmc-file2"])
    blocked = [a for a in header["arrays"] if "blocks" in a]
    chains = [a for a in blocked if a["shape"] == [12, 8]]
    assert len(chains) == 1
    assert sorted(b["start"][0] for b in chains[0]["blocks"]) == [0, 6]
    # parameters (RBM: 8 + 8 + 64 values) are written once
    singles = [a for a in header["arrays"] if "blocks" not in a]
    assert sum(np.prod(a["shape"]) for a in singles if a["dtype"] == "float64") >= 80


def test_file_size_does_not_grow_with_processes(runs):
    """Same global state from 1 and from 2 processes: the 2-process file is
    larger only by its block entries (measured: 372 bytes here)."""
    one, two = os.path.getsize(runs["vmc-file1"]), os.path.getsize(runs["vmc-file2"])
    assert two <= one + 1024, (one, two)


@pytest.mark.parametrize("n", [1, 3])
def test_chains_survive_a_change_of_process_count(runs, n):
    loaded = reported(runs["root"], f"chains-on{n}")
    saved = runs["vmc-saved-chains"]
    assert int(loaded["step_count"]) == K
    # every thermalised chain kept: the same multiset of configurations
    assert sorted(map(bytes, loaded["chains"])) == sorted(map(bytes, saved))
    assert list(loaded["resized"]) == [""]  # nothing to resize: no warning


def assert_loaded_exactly(saved, loaded):
    for k in saved.files:
        if k.startswith("param:") or k in ("chains", "step_count"):
            np.testing.assert_array_equal(loaded[k], saved[k], err_msg=k)


def assert_continues(reference, resumed):
    """A resume on another number of processes: the same run up to rounding."""
    np.testing.assert_allclose(resumed["losses"], reference["losses"][K:], rtol=1e-12)
    for k in reference.files:
        if k.startswith("param:"):
            np.testing.assert_allclose(resumed[k], reference[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_one_process_file_loads_on_two(runs):
    assert_loaded_exactly(runs["vmc-saved1"], reported(runs["root"], "file1-on2"))
    assert_continues(runs["vmc"], reported(runs["root"], "file1-resumed-on2"))


def test_multi_device_process_file_loads_on_two_processes(runs):
    """One process with 4 devices saves (its chains: 4 blocks of one
    process); 2 processes of one device each load it exactly."""
    assert_loaded_exactly(reported(runs["root"], "d4-save"), reported(runs["root"], "d4-on2"))


@pytest.mark.parametrize("n_chains", [8, 16])
def test_different_number_of_chains_keeps_what_fits(runs, n_chains):
    """12 saved chains into 8 (the first 8 kept) or 16 (all 12 kept, 4 new
    ones repeat the first 4), with a warning saying so."""
    loaded = reported(runs["root"], f"chains-into-{n_chains}")
    saved = runs["vmc-saved-chains"]
    np.testing.assert_array_equal(loaded["chains"], saved[np.arange(n_chains) % 12])
    assert any("12 chains" in w and f"template {n_chains}" in w for w in loaded["resized"])


def test_per_process_values_are_stacked_and_derived(runs):
    """A numpy sampler's state is per process: saved by 2, loaded by 2 each
    gets its own back; loaded by 3, process 2 continues process 0's chains
    with a generator jumped ahead (a different stream); loaded by 1, process
    0 gets its own and a warning says process 1's values are not used."""
    header = nkserde.format.read_header(runs["numpy-file"])
    assert "@per_process" in repr(header["tree"])
    saved = [of_rank(runs, "np-saved", r) for r in range(2)]
    warned = of_rank(runs, "np-on1", 0)["warned"]
    assert any("saved by 2 processes, loaded by 1" in str(w) for w in warned), warned
    for n in (1, 2, 3):
        for r in range(n):
            got = of_rank(runs, f"np-on{n}", r)
            np.testing.assert_array_equal(got["chains"], saved[r % 2]["chains"])
            if r < 2:
                np.testing.assert_array_equal(got["rng"], saved[r]["rng"])
            else:
                assert not np.array_equal(got["rng"], saved[0]["rng"])


def test_replicated_values_that_differ_are_refused(cache, tmp_path):
    outputs = launch(2, ["mismatch", tmp_path, tmp_path / "bad.nks"], jax_cache=cache, expect_failure=True)
    for out in outputs:
        assert "ProcessMismatchError" in out and "replicated" in out and "process 1" in out, out[-3000:]
    assert not (tmp_path / "bad.nks").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".nkserde-tmp")]


def test_a_state_dict_restores_in_memory_on_every_process(runs):
    """nkserde.from_state_dict(template, nkserde.state_dict(driver)) with 2
    processes: the chains spread over them come back from each process's
    own blocks (no file)."""
    for r in range(2):
        got = of_rank(runs, "state-dict", r)
        assert got["same"] and int(got["step_count"]) == 1, r


def test_each_process_reads_its_own_blocks(runs):
    """A load on 2 processes reads the replicated values and the blocks of
    its own shards, not the whole file."""
    for r in range(2):
        got = of_rank(runs, "own-blocks", r)
        assert got["same"] and got["params"]
        share = (1024 * 4096) // 2
        assert share <= got["read"] <= share + 64 * 1024, (r, int(got["read"]), int(got["size"]))


# ------------------------------------------------------------- the Checkpoint callback


def assert_same_checkpointed_run(reference, workdir):
    result = np.load(workdir / "result.npz")
    for k in reference.files:
        if k.startswith("param:"):
            np.testing.assert_array_equal(result[k], reference[k], err_msg=k)
    assert int(result["step_count"]) == STEPS
    log = json.loads((workdir / "out" / "log.log").read_text())
    assert log["Energy"]["iters"] == list(range(STEPS))  # every step exactly once
    np.testing.assert_array_equal(log["Energy"]["Mean"], reference["losses"])
    return result


def test_checkpointed_run_killed_resumes_exactly(runs, cache, tmp_path):
    """Both processes SIGKILLed after step 3 (checkpoint of step 2 on disk);
    the same command again resumes from step 2 and ends bit-identical to the
    uninterrupted run, JsonLog included."""
    launch(2, ["ckpt", tmp_path, "vmc", STEPS, "kill:3"], jax_cache=cache, expect_failure=True)
    assert not (tmp_path / "result.npz").exists()
    launch(2, ["ckpt", tmp_path, "vmc", STEPS, "run"], jax_cache=cache)
    result = assert_same_checkpointed_run(runs["vmc"], tmp_path)
    assert int(result["resumed_from"]) == 2
    # the JsonLog's rows went to one history log, appended by process 0 alone
    # (two writers would have broken its chain): one record per checkpoint,
    # and the resume's (from step 2) before the first checkpoint after it
    from nkserde.checkpoint_files import directory

    run = tmp_path / "ckpt" / "run-0"
    assert [p.name for p in directory.history_files(run)] == ["history-000001.nkh"]
    steps = directory.steps(run)
    records = [nkserde.load_state_dict(directory.step_path(run, s))["history"]["records"] for s in steps]
    assert records == [s // 2 + (s > 2) for s in steps], (steps, records)
    assert all(directory.problem(directory.step_path(run, s)) is None for s in steps)


def test_checkpoints_by_time_are_taken_at_the_same_step_on_every_process(runs, cache, tmp_path):
    """every="auto": the processes' clocks differ, so process 0 decides at each
    checkpoint the step of the next one and the others take its decision (a
    checkpoint all of them did not take together would fail or hang). The
    first one, after step 1, measures what a checkpoint costs."""
    launch(2, ["ckpt", tmp_path, "vmc", STEPS, "run"], jax_cache=cache, env={"MP_EVERY": "auto"})
    assert_same_checkpointed_run(runs["vmc"], tmp_path)
    steps = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "ckpt" / "run-0").glob("step-*.nks"))
    assert steps[0] == 1 and steps[-1] == STEPS, steps
    assert all(nkserde.verify(p) for p in (tmp_path / "ckpt" / "run-0").glob("step-*.nks"))


def test_signal_to_one_process_stops_all_at_the_same_step(runs, cache, tmp_path):
    """SIGTERM reaches process 1 only, after step 1 (background saves): it
    asks for a stop two steps on (coordination.StopFlag: the others read
    the flag from a thread while a step runs, and may have started step 1
    already), and both processes stop after step 3 with a checkpoint of it
    and end their program with exit status 75; the rerun finishes."""
    launch(2, ["ckpt", tmp_path, "vmc", STEPS, "sigterm:1"], jax_cache=cache)
    for r in range(2):
        got = np.load(tmp_path / f"rank-{r}.npz")
        assert int(got["step_count"]) == 3 and str(got["interrupted"]) == "SIGTERM", r
        assert int(got["exit_status"]) == 75, r
    assert (tmp_path / "ckpt" / "run-0" / "step-0000000003.nks").exists()
    launch(2, ["ckpt", tmp_path, "vmc", STEPS, "run"], jax_cache=cache)
    result = assert_same_checkpointed_run(runs["vmc"], tmp_path)
    assert int(result["resumed_from"]) == 3
    files = sorted(p.name for p in (tmp_path / "ckpt" / "run-0").iterdir())
    assert ".lock" not in files and "fingerprint.json" in files


# 2 and 8: the counts are the same at both ends (4 added 44 s of CI and no case);
# tests/test_coordination.py counts the same protocol to 1024
@pytest.mark.parametrize("n", [8])
def test_coordination_requests_per_step_and_save_do_not_grow_with_processes(cache, tmp_path, n):
    """Counted by every process (nkserde.processes.jax_service.counts): a step
    without a checkpoint is one request per process (the stop flag's
    non-blocking read, made by a thread while the step runs), a save three
    rounds through process 0 (3 requests each on every other process; on
    process 0 also the read of the messages, the answer and the deletion
    of a round's keys), the run's start two (the lock taken, then seen by
    every process as the checkpoint is chosen); whatever the number of
    processes. The coordinator serves the sum: O(P).

    The counts asserted have no P in them: 8 real processes (the most this
    suite launches) show them, every other multi-process test here runs
    2, and tests/test_coordination.py counts the same rounds at P = 64, 256
    and 1024 against the simulated store. (A launch of P = 2 here asserted
    the same constants; it went when CI's CPU time had to come down.)"""
    steps, saves = 6, 2  # checkpoints of steps 3 and 6 (every=3)
    launch(n, ["count", tmp_path, steps, 3], jax_cache=cache, timeout=400)
    per_rank = [np.load(tmp_path / f"rank-{r}.npz") for r in range(n)]
    for r, got in enumerate(per_rank):
        assert int(got["step_count"]) == steps
        # process 0's first round of a sequence (the start's, the directory's saves') has no keys to delete
        rounds = 3 * saves
        start, save, all_saves = (4 + 5, 4 + 5 + 5, 4 + 5 * (rounds - 1)) if r == 0 else (2 * 3, 3 * 3, rounds * 3)
        assert int(got["after"]) - int(got["before"]) == start + steps + all_saves, r
        per_step = np.diff(got["steps"])  # steps 2..6 (a read lands in its step or the next)
        plain = np.delete(per_step, 2)  # step 4 begins with the checkpoint of step 3
        assert plain.max() <= 2 and plain.sum() <= len(plain) + 1, (r, per_step)
        assert per_step[2] >= save, (r, per_step)
    received = [int(g["received"]) for g in per_rank]
    # nobody but process 0 receives more than its own answers: no description of every process
    assert max(received[1:]) < 400, received
    assert received[0] < 1200 * n, received


@pytest.mark.parametrize("when, what", [("before", "encoding the state"), ("writing", "writing blocks")])
def test_a_peer_that_dies_is_named_within_the_timeout(cache, tmp_path, when, what):
    """Process 1 is SIGKILLed before a save or while it writes its blocks:
    the others raise PeerLostError naming it after NKSERDE_PEER_TIMEOUT
    (here 8 s, plus the allowance for the bytes being written), not after
    JAX's 10-minute waits; the file saved before still verifies and no
    temporary file is left."""
    file = tmp_path / "files" / "driver.nks"
    file.parent.mkdir()
    env = {"NKSERDE_PEER_TIMEOUT": "8"}  # a loaded 2-core machine runs three processes and the rest
    launch(3, ["peer-dies", tmp_path, when, file], jax_cache=cache, env=env, expect_failure=True)
    for r in (0, 2):
        got = np.load(tmp_path / f"rank-{r}.npz")
        error = str(got["error"])
        assert error.startswith("PeerLostError") and "process 1 did not reach" in error and what in error, error
        assert list(got["missing"]) == [1], error
        assert 8 <= float(got["elapsed"]) < 40, float(got["elapsed"])
        assert list(got["temps"]) == [""], list(got["temps"])  # listed by process 0 after its save


def test_a_peer_killed_between_checkpoints_ends_the_others_and_the_rerun_resumes(runs, cache, tmp_path):
    """Process 1 is SIGKILLed after step 3, while process 0 goes on into
    step 4's collectives (NetKet's, which nkserde cannot interrupt): JAX's
    failure detection ends process 0 after its heartbeat timeout (here 5 s,
    set in jax.distributed.initialize) instead of leaving it waiting; the
    checkpoint of step 2 verifies, and the same command again resumes from
    it and ends as the uninterrupted run."""
    import time

    start = time.monotonic()
    outputs = launch(
        2, ["ckpt", tmp_path, "vmc", STEPS, "kill1:3"], jax_cache=cache, env={"MP_HEARTBEAT": "5"}, expect_failure=True
    )
    assert time.monotonic() - start < 120
    assert "unhealthy" in outputs[0] or "heartbeat" in outputs[0], outputs[0][-3000:]
    nkserde.verify(tmp_path / "ckpt" / "run-0" / "step-0000000002.nks")
    launch(2, ["ckpt", tmp_path, "vmc", STEPS, "run"], jax_cache=cache)
    result = assert_same_checkpointed_run(runs["vmc"], tmp_path)
    assert int(result["resumed_from"]) == 2
    # the JsonLog's rows went to one history log, appended by process 0 alone
    # (two writers would have broken its chain): one record per checkpoint,
    # and the resume's (from step 2) before the first checkpoint after it
    from nkserde.checkpoint_files import directory

    run = tmp_path / "ckpt" / "run-0"
    assert [p.name for p in directory.history_files(run)] == ["history-000001.nkh"]
    steps = directory.steps(run)
    records = [nkserde.load_state_dict(directory.step_path(run, s))["history"]["records"] for s in steps]
    assert records == [s // 2 + (s > 2) for s in steps], (steps, records)
    assert all(directory.problem(directory.step_path(run, s)) is None for s in steps)
