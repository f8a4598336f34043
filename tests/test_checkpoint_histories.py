"""Logger histories beside the checkpoints (nkserde/checkpoint/persist/logger_histories.py,
nkserde/format/history_log.py): a checkpoint costs what was logged since
the previous one, and a resume from any checkpoint that verifies restores
every logger with its steps, each once, through retention, damaged
checkpoints, damaged or torn history logs and failed writes.

Long histories are made at once (a RuntimeLog built from a state dict), not
logged step by step; the runs are a few steps of the 8-site VMC."""

from __future__ import annotations

import shutil
import warnings

import netket as nk
import numpy as np
import pytest

import builders as B
import nkserde
from nkserde.saving import line
from nkserde.checkpoint_files import content, directory

from nkserde.checkpoint.persist import logger_histories
from nkserde.cli import listing
from nkserde.errors import CorruptFileError, FileWriteError, LoadLimitError, UnsupportedVersionError
from nkserde.format import history_log

N_STEPS = 8
KEEP = nkserde.KeepLatest(2) | nkserde.KeepMultiples(3)  # steps 3, 6 and the newest two
SERIES = ("Energy", "acceptance")


def long_log(rows: int, observables: int = 6):
    """A RuntimeLog that already holds ``rows`` steps of ``observables``
    scalar series (``x0``...), as a long run's would."""
    steps = np.arange(rows)
    state = {
        "@type": "netket.logging.RuntimeLog",
        "@version": 1,
        "last_step": rows - 1,
        "history": [
            {
                "path": [f"x{i}"],
                "columns": {"iters": steps.copy(), "value": np.sin(0.1 * (i + 1) * steps)},
                "main": "value",
                "single": True,
                "keys": ["value"],
            }
            for i in range(observables)
        ],
    }
    return nkserde.from_state_dict(nk.logging.RuntimeLog(), state)


@pytest.fixture(scope="module")
def reference():
    """Energies of an uninterrupted run of N_STEPS."""
    log = nk.logging.RuntimeLog()
    B.vmc().run(N_STEPS, out=log, show_progress=False)
    return np.asarray(log.data["Energy"]["Mean"])


def run(directory_, n_steps, crash_at=None, log=None, **options):
    """A VMC run of ``n_steps`` with a RuntimeLog, checkpointed in
    ``directory_`` (every=2 unless said), crashing at the start of step
    ``crash_at``; returns (driver, log, checkpoint)."""
    options = {"every": 2, **options}
    driver, log = B.vmc(), nk.logging.RuntimeLog() if log is None else log
    ckpt = nkserde.Checkpoint(directory_, **options)
    callbacks = [ckpt] + ([B.CrashAt(crash_at)] if crash_at is not None else [])
    try:
        driver.run(n_steps, out=log, show_progress=False, callback=callbacks)
    except RuntimeError as exc:
        assert "crash" in str(exc)
    return driver, log, ckpt


def assert_each_step_once(log, reference, n_steps=N_STEPS):
    for name in SERIES:
        assert log.data[name].iters.tolist() == list(range(n_steps)), name
    assert np.asarray(log.data["Energy"]["Mean"]).tobytes() == reference[:n_steps].tobytes()


def position(path):
    return content.history_position(nkserde.load_state_dict(path))


def damage(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# ------------------------------------------------------------ what a save costs


def test_a_checkpoint_does_not_grow_with_the_history(tmp_path):
    """A RuntimeLog of 6 observables holding 20 steps, or 20,000: the
    checkpoint files and what each save appends to the history log are the
    same size (up to a few bytes of integers), not 2 MB larger."""
    sizes = {}
    for rows in (20, 20_000):
        ckpt = nkserde.Checkpoint(tmp_path / f"rows-{rows}", every=2, async_save=False)
        B.vmc().run(4, out=long_log(rows), show_progress=False, callback=ckpt)
        files = [ckpt.path(step).stat().st_size for step in (2, 4)]
        first, second = (position(ckpt.path(step)) for step in (2, 4))
        assert first["file"] == second["file"] and second["records"] == 2
        sizes[rows] = files, second["end"] - first["end"]  # the second save: the rows of steps 2 and 3
    (small, small_append), (large, large_append) = sizes[20], sizes[20_000]
    assert all(abs(a - b) < 64 for a, b in zip(small, large)), sizes
    assert abs(small_append - large_append) < 64, sizes
    # the whole history is in the log once: its first record
    assert sum(p.stat().st_size for p in directory.history_files(tmp_path / "rows-20000")) > 20_000 * 6 * 16


def test_a_save_of_a_logger_or_driver_stays_whole(tmp_path):
    """nkserde.save of a logger holds its whole history, checkpointed run or not."""
    log = long_log(50)
    B.vmc().run(2, out=log, show_progress=False, callback=nkserde.Checkpoint(tmp_path / "ckpt", every=1))
    nkserde.save({"log": log}, tmp_path / "log.nks")
    stored = nkserde.load_state_dict(tmp_path / "log.nks")["log"]
    assert stored["@type"] == "netket.logging.RuntimeLog"
    assert {tuple(s["path"]): len(s["columns"]["iters"]) for s in stored["history"]}["x0",] == 50
    assert not directory.history_files(tmp_path)  # no history log beside a file of its own


# ----------------------------------------------------- resume from any checkpoint


def test_every_checkpoint_resumes_with_each_step_once(tmp_path, reference):
    """Retention kept steps 3, 6 and 7 (keep=2, keep_every=3). A resume
    from each, the newer ones damaged, restores steps 0..k-1 once and ends
    as the uninterrupted run. Resumed from an older checkpoint, the log is
    continued in a new history log from that checkpoint's position (the
    old one's later records are not read, nor changed)."""
    first = tmp_path / "first"
    run(first, N_STEPS, crash_at=7, every=1, keep=KEEP)
    assert directory.steps(first) == [3, 6, 7]
    assert [p.name for p in directory.history_files(first)] == ["history-000001.nkh"]
    log_bytes = (first / "history-000001.nkh").read_bytes()
    for k in (3, 6, 7):
        case = tmp_path / f"from-{k}"
        shutil.copytree(first, case)
        for newer in (s for s in directory.steps(case) if s > k):
            damage(directory.step_path(case, newer), 100)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the damaged checkpoints are skipped with a warning
            driver, log, ckpt = run(case, N_STEPS, every=1, keep=KEEP)
        assert ckpt.resumed_from == k
        assert driver.step_count == N_STEPS
        assert_each_step_once(log, reference)
        assert (case / "history-000001.nkh").read_bytes()[: len(log_bytes)] == log_bytes  # only ever appended to
        logs = [p.name for p in directory.history_files(case)]
        assert logs == (["history-000001.nkh"] if k == 7 else ["history-000001.nkh", "history-000002.nkh"])
        if k != 7:
            assert history_log.read_header(case / "history-000002.nkh")["parent"] == position(
                first / f"step-{k:010d}.nks"
            )
        # every checkpoint left (old ones included, newer ones written again) verifies, with its history
        assert all(directory.problem(directory.step_path(case, step)) is None for step in directory.steps(case))
    # and the run resumed from step 3 resumes again, through both logs
    case = tmp_path / "from-3"
    driver, log, _ = run(case, N_STEPS, crash_at=None, every=1)
    assert_each_step_once(log, reference)


def test_a_torn_append_or_a_record_without_its_checkpoint_is_not_read(tmp_path, reference):
    """A crash in the middle of an append leaves a torn record after the
    last checkpoint's position; a crash after the append and before the
    checkpoint's rename, a whole record no checkpoint refers to. Every
    checkpoint still verifies and resumes with exactly its steps; the
    rerun continues in a new log."""
    first = tmp_path / "first"
    run(first, N_STEPS, crash_at=5)
    log = first / "history-000001.nkh"
    records, _ = history_log.read_records(
        log, file_id=history_log.read_header(log)["id"], end=None, records=None, chain_start=0
    )
    record = history_log.encode_record(records[-1]).data
    for name, tail in (("torn", record[: len(record) // 2]), ("whole", record)):
        case = tmp_path / name
        shutil.copytree(first, case)
        with open(case / log.name, "ab") as f:
            f.write(tail)
        assert all(directory.problem(directory.step_path(case, s)) is None for s in directory.steps(case))
        _, resumed, ckpt = run(case, N_STEPS)
        assert ckpt.resumed_from == 5
        assert_each_step_once(resumed, reference)
        assert [p.name for p in directory.history_files(case)] == ["history-000001.nkh", "history-000002.nkh"]


def test_a_failed_append_or_checkpoint_write_costs_that_checkpoint_only(tmp_path, reference, monkeypatch):
    """The append of step 4's rows fails half way (a full disk): step 4 is
    not checkpointed (a warning), step 6 continues in a new log from step
    2's position. The write of step 6's checkpoint fails after its rows
    were appended: step 8's checkpoint holds them. Resumes from 2, 8 (and
    from the rerun's end) restore each step once."""
    real_append, real_save = history_log.append, line.save_steps
    calls = {"append": 0}

    def failing_append(path, *, file_id, end, record):
        calls["append"] += 1
        if calls["append"] == 1:  # the append of step 4 (step 2's record created the log)
            with open(path, "ab") as f:
                f.write(record.data[:10])
            raise FileWriteError(28, f"{path}: history log: appending failed: No space left on device")
        return real_append(path, file_id=file_id, end=end, record=record)

    def failing_save(snapshot, path, **kwargs):
        if path.name == "step-0000000006.nks":
            raise FileWriteError(28, f"{path}: save failed: No space left on device")
        return (yield from real_save(snapshot, path, **kwargs))

    monkeypatch.setattr(history_log, "append", failing_append)
    monkeypatch.setattr(line, "save_steps", failing_save)
    first = tmp_path / "first"
    with pytest.warns(UserWarning, match="No space left"):
        run(first, N_STEPS, async_save=False, keep=10)
    monkeypatch.undo()
    assert directory.steps(first) == [2, 8]
    assert [p.name for p in directory.history_files(first)] == ["history-000001.nkh", "history-000002.nkh"]
    assert position(first / "step-0000000008.nks")["records"] == 2  # steps 6 and 8's rows, in the new log
    for k in (2, 8):
        case = tmp_path / f"from-{k}"
        shutil.copytree(first, case)
        for newer in (s for s in directory.steps(case) if s > k):
            directory.step_path(case, newer).unlink()
        _, resumed, ckpt = run(case, N_STEPS)
        assert ckpt.resumed_from == k
        assert_each_step_once(resumed, reference)


def test_a_damaged_history_log_resumes_the_newest_checkpoint_before_the_damage(tmp_path, reference):
    """A byte of step 6's record damaged: checkpoint 6 does not verify (its
    history does not), 4 and 2 do; the resume skips 6 with a warning naming
    the history log, and ls says so."""
    run(tmp_path, 6)
    log = tmp_path / "history-000001.nkh"
    damage(log, log.stat().st_size - 3)
    problem = directory.problem(tmp_path / "step-0000000006.nks")
    assert problem is not None and "history-000001.nkh" in problem and "checksum" in problem
    assert directory.problem(tmp_path / "step-0000000004.nks") is None
    (listed,) = listing.listing(tmp_path)
    assert listed["resume"] == "step-0000000004.nks"
    with pytest.warns(UserWarning, match=r"skipping checkpoint .*step-0000000006.*history-000001.nkh"):
        _, log_, ckpt = run(tmp_path, N_STEPS)
    assert ckpt.resumed_from == 4
    assert_each_step_once(log_, reference)


def test_a_checkpoint_whose_history_log_is_missing_or_another_is_skipped(tmp_path):
    run(tmp_path, 4)
    path = tmp_path / "step-0000000004.nks"
    log = tmp_path / "history-000001.nkh"
    saved = log.read_bytes()
    log.unlink()
    with pytest.raises(CorruptFileError, match="history-000001.nkh: the history log is missing"):
        logger_histories.resolve(path, nkserde.load_state_dict(path))
    # another log under its name: same records, another id
    header_length = history_log.PREAMBLE.unpack(saved[: history_log.PREAMBLE.size])[3]
    offset = history_log.PREAMBLE.size + header_length
    record = saved[offset:]
    history_log.create(log, file_id=history_log.new_id(), parent=None, record=_raw(record), meta={})
    with pytest.raises(CorruptFileError, match="another log under that name"):
        logger_histories.resolve(path, nkserde.load_state_dict(path))
    assert "another log" in directory.problem(path)


def _raw(data: bytes) -> history_log.Record:
    return history_log.Record(data, 0, 0)


# ---------------------------------------------------- what the checkpoint holds


def test_the_checkpoint_holds_stubs_and_the_log_position(tmp_path):
    run(tmp_path, 4)
    state = nkserde.load_state_dict(tmp_path / "step-0000000004.nks")
    assert state["layout"] == content.LAYOUT_VERSION == 2
    stub = state["loggers"]["RuntimeLog#0"]
    assert stub["@type"] == content.LOGGER_HISTORY and stub["@version"] == 1
    assert stub["logger"] == {"@type": "netket.logging.RuntimeLog", "@version": 1, "last_step": 3}
    energy = next(s for s in stub["series"] if s["path"] == ["Energy"])
    assert energy["rows"] == 4 and set(energy["columns"]) >= {"iters", "Mean", "Sigma"}
    assert all(len(a) == 0 for a in energy["columns"].values()) and energy["last"]["iters"] == 3
    assert set(state["history"]) == history_log.POSITION_KEYS and state["history"]["records"] == 2
    # resolved, it is what a layout-1 checkpoint holds: the registration's state, whole
    resolved = logger_histories.resolve(tmp_path / "step-0000000004.nks", state)
    logger = resolved["loggers"]["RuntimeLog#0"]
    assert set(logger) == {"@type", "@version", "history", "last_step"}
    series = {tuple(s["path"]): s for s in logger["history"]}
    assert series["Energy",]["columns"]["iters"].tolist() == [0, 1, 2, 3]
    assert resolved["history"]["logged"] == ["RuntimeLog#0"]


def test_stubs_and_records_that_disagree_are_errors_naming_what_differs(tmp_path):
    run(tmp_path, 4)
    path = tmp_path / "step-0000000004.nks"

    def rewritten(change):
        copy = tmp_path / "changed" / path.name
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(path, copy)
        shutil.copy(tmp_path / "history-000001.nkh", copy.parent)
        B.rewrite_header(copy, lambda h: change(h["tree"]))
        return copy

    def rows_plus_one(tree):
        next(s for s in tree["loggers"]["RuntimeLog#0"]["series"] if s["path"] == ["Energy"])["rows"] += 1

    def past_the_end(tree):
        tree["history"]["end"] += 1

    def chain(tree):
        tree["history"]["chain"] ^= 1

    def newer_layout(tree):
        tree["layout"] = 3

    for change, error, match in (
        (rows_plus_one, CorruptFileError, r"RuntimeLog#0, series Energy: the history log holds 4 rows.*recorded 5"),
        (past_the_end, CorruptFileError, "record 2 .*runs past|should end"),
        (chain, CorruptFileError, "chain to .* the checkpoint recorded"),
        (newer_layout, UnsupportedVersionError, "checkpoint layout 3 is newer"),
    ):
        copy = rewritten(change)
        with pytest.raises(error, match=match):
            logger_histories.resolve(copy, nkserde.load_state_dict(copy))


def test_resume_never_moves_the_history_logs_aside(tmp_path):
    run(tmp_path, 2)
    _, log, ckpt = run(tmp_path, 2, resume="never")
    assert ckpt.resumed_from is None and log.data["Energy"].iters.tolist() == [0, 1]
    (old,) = tmp_path.glob("previous-*")
    assert sorted(p.name for p in old.iterdir()) == ["fingerprint.json", "history-000001.nkh", "step-0000000002.nks"]
    assert directory.problem(old / "step-0000000002.nks") is None  # still resolves where it is
    assert [p.name for p in directory.history_files(tmp_path)] == ["history-000001.nkh"]  # the new run's


# ------------------------------------------------------- the history log's reader


def _log_file(tmp_path, trees) -> tuple:
    path = tmp_path / "history-000001.nkh"
    file_id = history_log.new_id()
    records = [history_log.encode_record(t) for t in trees]
    end = history_log.create(path, file_id=file_id, parent=None, record=records[0], meta={})
    value = records[0].chained(0)
    for record in records[1:]:
        end = history_log.append(path, file_id=file_id, end=end, record=record)
        value = record.chained(value)
    return path, {"file": path.name, "id": file_id, "end": end, "records": len(records), "chain": value}


def test_history_log_round_trip_and_damage(tmp_path):
    trees = [{"a": np.arange(3.0), "n": 1}, {"a": np.zeros((0, 2), np.complex128), "s": "x"}]
    path, pos = _log_file(tmp_path, trees)
    got = [t for _, t in directory.read_history(tmp_path, pos)]
    assert got[0]["n"] == 1 and got[0]["a"].tolist() == [0.0, 1.0, 2.0]
    assert got[1]["a"].shape == (0, 2) and got[1]["a"].dtype == np.complex128
    # appending where the log does not end is refused (the writer starts a new log)
    with pytest.raises(history_log.Mismatch, match="last record ended"):
        history_log.append(path, file_id=pos["id"], end=pos["end"] - 1, record=history_log.encode_record({}))
    with pytest.raises(history_log.Mismatch, match="another log"):
        history_log.append(path, file_id=history_log.new_id(), end=pos["end"], record=history_log.encode_record({}))
    data = path.read_bytes()
    cases = {
        "magic": (0, "not an nkserde history log"),
        "header": (history_log.PREAMBLE.size + 2, "header checksum mismatch"),
        "record head": (pos["end"] - 40, "record 1 .*checksum mismatch"),
    }
    for name, (offset, match) in cases.items():
        damaged = bytearray(data)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        with pytest.raises(CorruptFileError, match=match):
            directory.read_history(tmp_path, pos)
    path.write_bytes(data[:-5])  # truncated
    with pytest.raises(CorruptFileError, match=r"history-000001.nkh: the history log holds .* bytes"):
        directory.read_history(tmp_path, pos)
    newer = bytearray(data)
    newer[8] = 2
    path.write_bytes(bytes(newer))
    with pytest.raises(UnsupportedVersionError, match="history log version 2 is newer"):
        directory.read_history(tmp_path, pos)


def test_history_log_reads_are_bounded(tmp_path):
    path, pos = _log_file(tmp_path, [{"a": np.zeros(1000)}])
    nkserde.set_load_limits(max_load_bytes=4000)
    try:
        with pytest.raises(LoadLimitError, match="record 0 .*8000 bytes"):
            directory.read_history(tmp_path, pos)
    finally:
        nkserde.set_load_limits()
    nkserde.set_load_limits(max_header_bytes=16)
    try:
        with pytest.raises(LoadLimitError, match="history log header of"):
            directory.read_history(tmp_path, pos)
    finally:
        nkserde.set_load_limits()
    # a position naming a file outside the directory is refused before anything is opened
    with pytest.raises(CorruptFileError, match="not the name of a history log"):
        directory.read_history(tmp_path, {**pos, "file": "../history-000001.nkh"})
