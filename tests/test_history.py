"""A run's history across its restarts: ``nkserde.history``, ``nkserde
history`` and ``nkserde plot`` (nkserde/checkpoint/persist/run_history.py,
nkserde/cli/history_command.py, nkserde/cli/plot_command.py).

One small VMC run, made once for the module: 16 steps, a checkpoint every
4, a RuntimeLog and a JsonLog (which log the same), killed in the middle of
step 6 (no checkpoint of half a step: it resumes from step 4), then in the
middle of step 14 with its newest checkpoint, step 12's, damaged (it
resumes from step 8, and the rows of steps 8 to 11 it had logged are run
again). What the commands print is compared with what the last run's
RuntimeLog holds, bit for bit. The command runs in a subprocess where its
exit status or imports are the subject, else in this process (no JAX to
import again). Old directories are the fixtures'.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import netket as nk
import numpy as np
import pytest

import builders as B
import nkserde
from nkserde.checkpoint.persist.run_history import Restart
from nkserde.checkpoint_files import directory
from nkserde.cli import commands as cli
from nkserde.format import history_log

STEPS, EVERY = 16, 4
FIXTURES = Path(__file__).parent / "fixtures"
COLUMNS = [  # the table's columns: (column, quantity, field)
    ("Energy/Mean", "Energy", "Mean"),
    ("Energy/Variance", "Energy", "Variance"),
    ("Energy/Sigma", "Energy", "Sigma"),
    ("Energy/R_hat", "Energy", "R_hat"),
    ("Energy/TauCorr", "Energy", "TauCorr"),
    ("acceptance", "acceptance", "value"),
    ("wallclock", "wallclock", "value"),
]
RESTARTS = (Restart(step=4, at=4, redone=None), Restart(step=8, at=8, redone=(8, 11)))


def damage(path: Path, offset: int = 100):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """(the checkpoint directory, the RuntimeLog of the run that finished)."""
    root = tmp_path_factory.mktemp("history")
    ckpt = root / "ckpt"

    def attempt(*callbacks):
        log = nk.logging.RuntimeLog()
        out = [log, nk.logging.JsonLog(str(root / "log"), save_params=False)]
        checkpoint = nkserde.Checkpoint(ckpt, every=EVERY, async_save=False)
        try:
            B.vmc().run(STEPS, out=out, show_progress=False, callback=[checkpoint, *callbacks])
        except RuntimeError as exc:
            assert "killed" in str(exc)
        return log

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # half a step is not checkpointed; a damaged checkpoint is skipped
        attempt(B.KillAt(6))
        attempt(B.KillAt(14))
        damage(ckpt / "step-0000000012.nks")
        log = attempt()
    assert log.data["Energy"].iters.tolist() == list(range(STEPS))
    return ckpt, log


def logged(log, name: str, field: str) -> np.ndarray:
    return np.asarray(log.data[name].iters if field == "iters" else log.data[name][field])


def run_cli(*args):
    """The console script in a new process: (exit status, stdout, stderr)."""
    script = Path(sys.executable).with_name("nkserde")
    done = subprocess.run([str(script), *map(str, args)], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def here(*args):
    """The command line in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def parsed(texts: list[str], dtype) -> np.ndarray:
    """Numbers as the command wrote them, read back into ``dtype``."""
    read = complex if np.dtype(dtype).kind == "c" else int if np.dtype(dtype).kind in "iu" else float
    return np.array([read(t) for t in texts], dtype=dtype)


# ------------------------------------------------------------------ Python


def test_the_history_holds_every_step_once_as_the_log_had_it(killed):
    ckpt, log = killed
    h = nkserde.history(ckpt)
    assert list(h) == ["Energy", "acceptance", "wallclock"]  # the JsonLog's, the same, listed once
    for name in h:
        assert list(h[name]) == ["iters", *log.data[name].keys()]
        for field, values in h[name].items():
            expected = logged(log, name, field)
            assert values.dtype == expected.dtype and values.tobytes() == expected.tobytes(), (name, field)
    assert h.restarts == RESTARTS and h.restarts_recorded
    assert (h.checkpoint, h.directory, h.run) == (ckpt / "step-0000000016.nks", ckpt, None)
    assert h.main("Energy") == "Mean" and h.main("acceptance") == "value"
    table = h.table()  # for pandas.DataFrame: a row per step, a column per field
    assert list(table) == ["iters"] + [column for column, _, _ in COLUMNS]
    assert table["iters"].tolist() == list(range(STEPS))
    for column, name, field in COLUMNS:
        assert table[column].tobytes() == logged(log, name, field).tobytes()
    # a checkpoint file: the history up to it, and the restarts before it
    h8 = nkserde.history(ckpt / "step-0000000008.nks")
    assert h8["Energy"]["iters"].tolist() == list(range(8)) and h8.restarts == RESTARTS[:1]


def test_a_file_of_nkserde_save_holding_a_logger(killed, tmp_path):
    _, log = killed
    nkserde.save({"log": log}, tmp_path / "log.nks")
    h = nkserde.history(tmp_path / "log.nks")
    assert h["Energy"]["Mean"].tobytes() == logged(log, "Energy", "Mean").tobytes()
    assert h.restarts == () and not h.restarts_recorded  # nothing says whether it restarted


# ------------------------------------------------------------------ nkserde history


def test_csv_holds_the_logged_numbers_bit_for_bit_and_marks_the_restarts(killed):
    ckpt, log = killed
    code, out, err = run_cli("history", ckpt, "--csv")
    assert (code, err) == (0, "")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["iters"] + [column for column, _, _ in COLUMNS] + ["restart", "redone"]
    assert parsed([r["iters"] for r in rows], np.int64).tolist() == list(range(STEPS))
    for column, name, field in COLUMNS:
        expected = logged(log, name, field)
        assert parsed([r[column] for r in rows], expected.dtype).tobytes() == expected.tobytes(), column
    assert [int(r["restart"]) for r in rows] == [0] * 4 + [1] * 4 + [2] * 8  # restarts before each row
    assert [int(r["redone"]) for r in rows] == [0] * 8 + [1] * 4 + [0] * 4  # steps 8 to 11, logged twice


def test_the_table_holds_the_logged_numbers_bit_for_bit_and_says_the_restarts(killed):
    ckpt, log = killed
    code, out, err = run_cli("history", ckpt)  # the last 20 rows: all 16
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"{ckpt}  from step-0000000016.nks"
    assert lines[1] == "  16 rows, iters 0 to 15; 2 restarts"
    assert lines[2] == "  restart 1: resumed the checkpoint of step 4, logged from iters 4 on"
    assert lines[3] == (
        "  restart 2: resumed the checkpoint of step 8, logged from iters 8 on; "
        "iters 8 to 11 had been logged before it and were run again"
    )
    header = next(i for i, line in enumerate(lines) if line.startswith("iters "))
    assert lines[header].split() == ["iters"] + [column for column, _, _ in COLUMNS] + ["note"]
    cells = [line.split(maxsplit=len(COLUMNS) + 1) for line in lines[header + 1 : header + 1 + STEPS]]
    assert [int(c[0]) for c in cells] == list(range(STEPS))
    for j, (column, name, field) in enumerate(COLUMNS, start=1):
        expected = logged(log, name, field)
        assert parsed([c[j] for c in cells], expected.dtype).tobytes() == expected.tobytes(), column
    notes = {int(c[0]): c[len(COLUMNS) + 1] for c in cells if len(c) > len(COLUMNS) + 1}
    assert notes == {4: "<- restart 1", 8: "<- restart 2, run again", 9: "run again", 10: "run again", 11: "run again"}
    code, out, _ = here("history", ckpt, "--last", "3", "--keys", "Energy/Mean")
    assert code == 0 and "  (the last 3 of 16 rows; --all shows every row, --csv writes them)" in out.splitlines()
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert [r[0] for r in rows] == ["13", "14", "15"] and all(len(r) == 2 for r in rows)


def test_json_has_each_quantity_as_logged_and_the_restarts(killed):
    ckpt, log = killed
    code, out, err = here("history", ckpt, "--json", "--keys", "Energy", "--keys", "acceptance")
    assert (code, err) == (0, "")
    data = json.loads(out)
    (run,) = data["runs"]
    assert run["checkpoint"] == str(ckpt / "step-0000000016.nks") and run["restarts_recorded"] is True
    assert run["restarts"] == [{"step": 4, "at": 4, "redone": None}, {"step": 8, "at": 8, "redone": [8, 11]}]
    assert list(run["quantities"]) == ["Energy", "acceptance"]
    energy = run["quantities"]["Energy"]
    assert energy["main"] == "Mean"
    assert energy["columns"] == {f: logged(log, "Energy", f).tolist() for f in ["iters", *log.data["Energy"].keys()]}


# ------------------------------------------------------------------ nkserde plot


def curve_pixels(image: np.ndarray, rgb, tolerance=40) -> np.ndarray:
    """(row, column) of the pixels of about the colour ``rgb``."""
    distance = np.abs(image[:, :, :3].astype(int) - np.array(rgb)).sum(axis=2)
    return np.argwhere(distance < tolerance)


@pytest.mark.plot
def test_the_plot_is_an_image_of_the_asked_size_showing_the_curve_and_the_restarts(killed, tmp_path):
    from PIL import Image

    ckpt, log = killed
    png = tmp_path / "run.png"
    code, out, err = here("plot", ckpt, "-o", png, "--keys", "Energy", "--size", "900x700", "--exact", "-10.2")
    assert (code, err) == (0, "") and out == f"{png}: Energy; 2 restarts marked (900x700)\n"
    image = np.asarray(Image.open(png).convert("RGB"))
    assert image.shape == (700, 900, 3)
    # the energy's curve (matplotlib's first colour, C0) crosses the panel, and falls as the energy does
    curve = curve_pixels(image, (31, 119, 180))
    left, right = curve[:, 1].min(), curve[:, 1].max()
    assert right - left > 600, (left, right)
    energy = logged(log, "Energy", "Mean")
    assert energy[-3:].mean() < energy[:3].mean()  # the run converges: its curve goes down the image
    span = right - left
    start = curve[curve[:, 1] < left + span / 10][:, 0].mean()
    end = curve[curve[:, 1] > right - span / 10][:, 0].mean()
    assert end > start + 50, (start, end)
    # a dashed vertical line at each restart: at steps 4 and 8 of the curve's 0 to 15
    gray = curve_pixels(image, (89, 89, 89), tolerance=30)
    counts = np.bincount(gray[:, 1], minlength=image.shape[1])
    lines = np.flatnonzero(counts > 0.25 * image.shape[0])
    clusters = np.split(lines, np.flatnonzero(np.diff(lines) > 3) + 1)
    assert len(clusters) == 2, lines
    steps = [(c.mean() - left) / span * (STEPS - 1) for c in clusters]
    assert steps == pytest.approx([4, 8], abs=0.3)
    # SVG and PDF by the name
    for kind, magic in (("svg", b"<?xml"), ("pdf", b"%PDF")):
        code, _, _ = here("plot", ckpt, "-o", tmp_path / f"run.{kind}")
        assert code == 0 and (tmp_path / f"run.{kind}").read_bytes().startswith(magic)


HIDDEN_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # not installed: importing it raises ImportError
from nkserde.cli import main
code = main(sys.argv[1:])
assert "matplotlib" not in sys.modules or sys.modules["matplotlib"] is None
sys.exit(code)
"""


def test_without_matplotlib_plot_names_the_extra_and_history_works(killed, tmp_path):
    ckpt, _ = killed
    done = subprocess.run(
        [sys.executable, "-c", HIDDEN_MATPLOTLIB, "plot", ckpt, "-o", tmp_path / "run.png"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("nkserde plot: error: nkserde plot needs matplotlib")
    assert done.stderr.rstrip().endswith('pip install "nkserde[plot]"')
    assert not (tmp_path / "run.png").exists()
    done = subprocess.run(
        [sys.executable, "-c", HIDDEN_MATPLOTLIB, "history", ckpt, "--csv"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and len(done.stdout.splitlines()) == STEPS + 1


@pytest.mark.parametrize(
    "args, says",
    [
        (["history", "{empty}"], "not a checkpoint directory"),
        (["history", "{missing}"], "no such file or directory"),
        (["history", "{text}"], "not an nkserde file"),
        (["history", "{ckpt}", "--keys", "Magnetization"], "Magnetization was never logged (logged: Energy, acc"),
        (["plot", "{ckpt}", "-o", "{out}.png", "--keys", "Energy,Magnetization"], "Magnetization was never logged"),
        (["plot", "{ckpt}", "-o", "{out}.jpg"], "ends in .png, .svg or .pdf"),
        (["plot", "{ckpt}", "-o", "{out}.png", "--size", "9x9"], "expected WIDTHxHEIGHT in pixels"),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else None,
)
def test_bad_input_is_one_line_and_exit_status_2(killed, tmp_path, args, says):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("Energy -10.0053 +- 0.0021\n" * 4)
    names = {"empty": tmp_path / "empty", "missing": tmp_path / "missing", "text": tmp_path / "notes.txt"}
    args = [a.format(ckpt=killed[0], out=tmp_path / "run", **names) for a in args]
    code, out, err = run_cli(*args) if args[0] == "history" and "empty" in args[1] else here(*args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"nkserde {args[0]}: error: ") and says in err
    assert not list(tmp_path.glob("run*"))


# ------------------------------------------------------------------ beside the run, and old directories


class ReadsTheHistory(nk.callbacks.AbstractCallback):
    """At the end of step ``at``, what ``nkserde.history`` reads of the
    run's directory, and its lock file before and after."""

    at: int = nk.utils.struct.field(pytree_node=False, serialize=False)
    seen: dict = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, at, directory):
        self.at, self.seen = at, {"directory": directory}

    def on_step_end(self, step, log_data, driver):
        if driver.step_count == self.at:
            lock = self.seen["directory"] / ".lock"
            self.seen["lock"] = lock.stat().st_ino, lock.read_bytes()
            self.seen["history"] = nkserde.history(self.seen["directory"])
            self.seen["lock after"] = lock.stat().st_ino, lock.read_bytes()


def test_the_history_reads_beside_the_run_writing_and_leaves_it_be(tmp_path):
    ckpt = tmp_path / "ckpt"
    log, reader = nk.logging.RuntimeLog(), ReadsTheHistory(10, ckpt)
    callbacks = [nkserde.Checkpoint(ckpt, every=EVERY), reader]  # written in the background
    B.vmc().run(STEPS, out=log, show_progress=False, callback=callbacks)
    seen = reader.seen
    h = seen["history"]
    assert seen["lock"] == seen["lock after"]  # the run's lock file, the same and as it was: not taken
    rows = int(h.checkpoint.name[len("step-") : -len(".nks")])  # step 8, or 4 if 8's write was in flight
    assert rows in (4, 8) and h["Energy"]["iters"].tolist() == list(range(rows))
    assert h["Energy"]["Mean"].tobytes() == logged(log, "Energy", "Mean")[:rows].tobytes()
    assert all(directory.problem(directory.step_path(ckpt, s)) is None for s in directory.steps(ckpt))
    # the run's writes in flight: half a record at the end of its log, a checkpoint's temporary file
    record = history_log.encode_record({"step": 20, "loggers": []}).data
    (log_file,) = directory.history_files(ckpt)
    with open(log_file, "ab") as f:
        f.write(record[: len(record) // 2])
    (ckpt / ".step-0000000020.nks~host~1.tmp").write_bytes(b"\x89NKSERDE" + b"\0" * 40)
    after = nkserde.history(ckpt)
    assert after.checkpoint.name == "step-0000000016.nks" and after.restarts == ()
    assert after["Energy"]["Mean"].tobytes() == logged(log, "Energy", "Mean").tobytes()


def test_the_newest_checkpoint_damaged_the_one_before_is_read_with_a_warning(killed, tmp_path):
    ckpt, log = killed
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt, copy)
    damage(copy / "step-0000000016.nks", offset=(copy / "step-0000000016.nks").stat().st_size - 40)
    code, out, err = here("history", copy, "--csv", "--keys", "Energy/Mean")
    assert code == 0 and err.count("\n") == 1
    assert err.startswith("nkserde history: warning: nkserde: skipping checkpoint") and "step-0000000016.nks" in err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["iters"] for r in rows] == [str(i) for i in range(12)]  # step 12's history


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*/checkpoint/ckpt")), ids=lambda p: p.parts[-3])
def test_directories_of_earlier_nkserde_versions(fixture):
    newest = directory.steps(fixture)[-1]
    h = nkserde.history(fixture)
    assert h.checkpoint.name == f"step-{newest:010d}.nks"
    assert h["Energy"]["iters"].tolist() == list(range(newest))
    assert h.restarts == ()
    expected = fixture.parent.parent / "histories.json"
    if expected.exists():  # the energies the writer's run logged, bit for bit
        energies = json.loads(expected.read_text())["energies"][:newest]
        assert np.real(h["Energy"]["Mean"]).tolist() == energies
    # layout 1 (whole histories in the checkpoints): nothing says whether it restarted
    assert h.restarts_recorded == any(fixture.glob("history-*.nkh"))
    code, out, err = here("history", fixture, "--csv", "--keys", "Energy/Mean")
    assert code == 0 and len(out.splitlines()) == newest + 1


def test_an_old_directory_continued_records_its_restart(tmp_path):
    """A directory of nkserde before history logs (every history whole in
    each checkpoint: nothing says whether that run restarted), continued
    from its step 24 by today's: the history log it starts marks the restart."""
    import scenarios

    shutil.copytree(FIXTURES / "histories-a60e14f" / "checkpoint", tmp_path / "run")
    nkserde.checkpoint.reset_run_numbering()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "nkserde: Checkpoint.keep_every", FutureWarning)  # the fixture's script
        _, runtime = scenarios.history_run(tmp_path / "run", 28, nkserde.Checkpoint)
    h = nkserde.history(tmp_path / "run" / "ckpt")
    assert h.restarts_recorded and h.restarts == (Restart(step=24, at=24, redone=None),)
    assert h["Energy"]["Mean"].tobytes() == logged(runtime, "Energy", "Mean").tobytes()
