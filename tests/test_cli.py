"""The ``nkserde`` command line, run as users run it: the installed console
script (beside ``sys.executable``) and ``python -m nkserde``, in
subprocesses, on real checkpoints made once for the module: a VMC
Checkpoint directory, a ``checkpointed(...)`` directory with a VMC run and
a TDVP run, a file written by two JAX processes, a copy of the VMC
directory whose newest checkpoint is damaged, a damaged file, a file that
is not an nkserde file and a missing path. Each case checks the exit code
and the ``--json`` output (docs/cli.md), not only that something printed.
The cases of ``diff`` and ``migrate --template`` whose subject is the
comparison or the migration itself run the command in this process
(``here``): both import NetKet, seconds of CPU per process; their entry
points and first messages run in subprocesses like the rest.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import netket as nk
import numpy as np
import pytest

import builders
import nkserde
from multiprocess import in_turn, launch
from nkserde.cli import commands as cli
from nkserde.cli import compare
from nkserde.loading import file_info
from nkserde.schema import manifest as schema
from nkserde.checkpoint.persist import logger_histories as histories

SCRIPT = Path(sys.executable).with_name("nkserde")
FIXTURES = Path(__file__).parent / "fixtures"


def run(*args, module=False):
    """Runs the CLI in a new process; returns (exit code, stdout, stderr)."""
    assert SCRIPT.exists(), f"the console script is not installed beside {sys.executable}: pip install -e ."
    command = [sys.executable, "-m", "nkserde"] if module else [str(SCRIPT)]
    done = subprocess.run([*command, *map(str, args)], capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def run_json(*args, module=False):
    code, out, err = run(*args, "--json", module=module)
    return code, _json(out, err)


def here(*args):
    """Runs the CLI in this process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def here_json(*args):
    code, out, err = here(*args, "--json")
    return code, _json(out, err)


def _json(out: str, err: str) -> dict:
    assert err == "" or "Traceback" not in err, err
    data = json.loads(out)
    assert data["nkserde_json"] == 1
    return data


def damage(path: Path, offset: int = 70):
    """Flips one byte of the array payload (arrays start at byte 64): the
    header still reads, a checksum fails."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """checkpointed(...)'s directory of a ground state (run-0), then a TDVP
    quench (run-1): one process (the plot test runs in CI's Python 3.13
    venv with this fixture alone)."""
    root = tmp_path_factory.mktemp("two-runs") / "dyn"
    nkserde.checkpoint.reset_run_numbering()
    gs = nkserde.checkpointed(builders.vmc(), root, every=2, async_save=False)
    gs.run(4, out=nk.logging.RuntimeLog(), show_progress=False)
    te = nkserde.checkpointed(builders.tdvp(), root, every=2, async_save=False)
    te.run(0.04, out=nk.logging.RuntimeLog(), show_progress=False)
    nkserde.checkpoint.reset_run_numbering()
    return root


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, two_runs):
    root = tmp_path_factory.mktemp("cli")
    # a Checkpoint directory of a VMC run: steps 2, 4, 6
    driver = builders.vmc()
    driver.run(
        6,
        out=nk.logging.RuntimeLog(),
        show_progress=False,
        callback=nkserde.Checkpoint(root / "vmc", every=2, async_save=False),
    )
    nkserde.save(driver, root / "driver.nks")  # the driver alone, as the step-6 checkpoint holds it
    # the same directory with its newest checkpoint damaged
    shutil.copytree(root / "vmc", root / "damaged-dir")
    damage(root / "damaged-dir" / "step-0000000006.nks")
    shutil.copy(root / "vmc" / "step-0000000004.nks", root / "damaged.nks")
    damage(root / "damaged.nks")
    shutil.copytree(two_runs, root / "dyn")
    # small files whose values differ slightly, and by an entry
    x = np.linspace(0.0, 1.0, 10)
    nkserde.save({"x": x, "n": 3}, root / "x.nks")
    nkserde.save({"x": x + 1e-9, "n": 3}, root / "x-close.nks")
    nkserde.save({"x": x.astype(np.float32), "y": np.zeros(2), "n": 4}, root / "x-other.nks")
    (root / "notes.txt").write_text("Energy of the run, copied from the cluster: -10.0053 +- 0.0021\n" * 4)
    # one file written by two JAX processes (VMC after 1 step: chains in blocks),
    # then a checkpointed run of 4 steps by the same two (mp-run/ckpt/run-0, JsonLog in mp-run/out)
    launch(
        2,
        in_turn(
            ["save", root / "mp", "vmc", 1, root / "two-processes.nks"], ["ckpt", root / "mp-run", "vmc", 4, "run"]
        ),
    )
    return root


def test_help_is_complete():
    parser = cli.build_parser()
    text = parser.format_help()
    for command in ("inspect", "verify", "diff", "ls", "migrate", "history", "plot"):
        assert command in text
    sub = next(a for a in parser._actions if a.dest == "command").choices
    for command, options in (
        ("inspect", ["--arrays", "--json", "--debug"]),
        ("verify", ["--json"]),
        ("diff", ["--atol", "--rtol", "--json"]),
        ("ls", ["--no-verify", "--json"]),
        ("migrate", ["--dry-run", "--in-place", "--json"]),
        ("history", ["--keys", "--last", "--all", "--csv", "--json"]),
        ("plot", ["--output", "--keys", "--exact", "--size", "--json"]),
    ):
        help_text = sub[command].format_help()
        for option in options:
            assert option in help_text, (command, option)


def test_inspect_driver_checkpoint(inputs):
    code, data = run_json("inspect", inputs / "vmc" / "step-0000000004.nks")
    assert code == 0
    info = data["info"]
    assert info["root_type"] == "checkpoint" and info["process_count"] == 1
    assert info["format_version"] == 2 and info["netket"] == nk.__version__
    assert info["types"]["netket.driver.VMC"] == 1
    entries = {e["path"]: e for e in data["entries"]}
    kernel = entries["driver/state/parameters/Dense/kernel"]
    assert kernel["kind"] == "array" and kernel["dtype"] == "float64" and kernel["shape"] == [8, 8]
    assert kernel["stored_bytes"] == 512 and kernel["codec"] == "raw"
    mcstate_version = schema.current_versions()["types"]["netket.vqs.MCState"]  # 2 since cached samples are stored
    assert kernel["type"] == "netket.vqs.MCState" and kernel["schema_version"] == mcstate_version
    assert entries["driver"] == {
        "kind": "object",
        "path": "driver",
        "type": "netket.driver.VMC",
        "schema_version": 1,
        "per_process": False,
    }
    assert entries["completed_steps"]["value"] == 4
    assert entries["driver/state/sampler_state/chains"]["dtype"] == "int8"
    assert "stats" not in kernel  # the header only


def test_inspect_tdvp_checkpoint_with_arrays_as_module(inputs):
    code, data = run_json("inspect", "--arrays", inputs / "dyn" / "run-1" / "step-0000000004.nks", module=True)
    assert code == 0
    entries = {e["path"]: e for e in data["entries"]}
    assert entries["driver"]["type"] == "netket.experimental.TDVP"
    t = entries["driver/integrator/t/value"]
    assert t["type"] == "netket.utils.KahanSum" and t["shape"] == []
    assert t["stats"]["min"] == pytest.approx(0.04) and t["stats"]["nan"] == 0
    state = nkserde.load_state_dict(inputs / "dyn" / "run-1" / "step-0000000004.nks")
    kernel = state["driver"]["state"]["parameters"]["Dense"]["kernel"]
    stats = entries["driver/state/parameters/Dense/kernel"]["stats"]
    assert stats["min"] == kernel.min() and stats["max"] == kernel.max()
    assert stats["mean"] == pytest.approx(kernel.mean(), rel=1e-12) and stats["of"] == "value"


def test_inspect_two_process_file(inputs):
    code, data = run_json("inspect", inputs / "two-processes.nks")
    assert code == 0
    assert data["info"]["process_count"] == 2
    chains = next(e for e in data["entries"] if e["path"] == "state/sampler_state/chains")
    assert chains["blocks"] == 2 and chains["shape"] == [12, 8]  # one block written by each process
    assert chains["stored_bytes"] == sum(
        b["stored"]
        for b in nkserde.format.read_header(inputs / "two-processes.nks")["arrays"][chains["index"]]["blocks"]
    )


def test_inspect_reads_the_header_only_and_arrays_fail_on_damage(inputs):
    code, data = run_json("inspect", inputs / "damaged.nks")
    assert code == 0 and data["info"]["root_type"] == "checkpoint"
    code, out, err = run("inspect", "--arrays", inputs / "damaged.nks")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "checksum mismatch" in err and "damaged.nks" in err
    assert "Traceback" not in err


def test_verify_reports_each_file(inputs):
    files = [
        inputs / "vmc",
        inputs / "two-processes.nks",
        inputs / "damaged.nks",
        inputs / "notes.txt",
        inputs / "missing.nks",
    ]
    code, data = run_json("verify", *files)
    assert code == 1 and data["ok"] is False
    results = {Path(r["file"]).name: r for r in data["files"]}
    assert [results[f"step-000000000{s}.nks"]["ok"] for s in (2, 4, 6)] == [True, True, True]
    assert results["two-processes.nks"]["ok"] and results["two-processes.nks"]["info"]["process_count"] == 2
    assert not results["damaged.nks"]["ok"] and "checksum mismatch" in results["damaged.nks"]["problem"]
    assert "not an nkserde file" in results["notes.txt"]["problem"]
    assert "no such file" in results["missing.nks"]["problem"]


def test_verify_plain_text_all_good(inputs):
    code, out, err = run("verify", inputs / "dyn", inputs / "driver.nks")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 5 and all(line.endswith(": ok") for line in lines)  # run-0: 2, 4; run-1: 2, 4; driver


def test_diff_two_steps_of_a_run(inputs):
    code, data = here_json("diff", inputs / "vmc" / "step-0000000004.nks", inputs / "vmc" / "step-0000000006.nks")
    assert code == 1 and data["same"] is False
    values = {c["path"]: c for c in data["changed_values"]}
    kernel = values["driver/state/parameters/Dense/kernel"]
    a = nkserde.load_state_dict(inputs / "vmc" / "step-0000000004.nks")["driver"]["state"]["parameters"]
    b = nkserde.load_state_dict(inputs / "vmc" / "step-0000000006.nks")["driver"]["state"]["parameters"]
    delta = np.abs(a["Dense"]["kernel"] - b["Dense"]["kernel"])
    assert kernel["max_abs"] == pytest.approx(delta.max(), rel=1e-12)
    assert kernel["differing"] == np.count_nonzero(delta) and kernel["size"] == 64
    scalars = {c["path"]: (c["a"], c["b"]) for c in data["changed_scalars"]}
    assert scalars["completed_steps"] == (4, 6)


def test_diff_checkpoint_against_its_driver_file(inputs):
    code, out, err = here("diff", inputs / "vmc" / "step-0000000006.nks", inputs / "driver.nks")
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == "same"


def test_diff_tolerances_and_layout(inputs):
    code, data = here_json("diff", inputs / "x.nks", inputs / "x-close.nks", "--atol", "1e-6")
    assert code == 0 and data["same"] and data["atol"] == 1e-6
    code, data = run_json("diff", inputs / "x.nks", inputs / "x-other.nks", module=True)
    assert code == 1
    assert data["only_in_b"] == ["y"] and data["only_in_a"] == []
    assert data["changed_layout"] == [
        {"path": "x", "a": {"dtype": "float64", "shape": [10]}, "b": {"dtype": "float32", "shape": [10]}}
    ]
    assert data["changed_scalars"] == [{"path": "n", "a": 3, "b": 4}]
    (x,) = data["changed_values"]  # float32 rounding of linspace
    assert x["path"] == "x" and 0 < x["max_abs"] < 1e-7


def test_diff_across_schema_versions():
    # nkserde 0.1's names and schema 1 against today's: the same state
    code, data = here_json(
        "diff", FIXTURES / "nkserde-ea7de03" / "vmc_adam.nks", FIXTURES / "netket-3.23.0" / "vmc_adam.nks"
    )
    assert code == 0 and data["same"], data


def test_diff_errors_exit_2(inputs, capsys):
    code, out, err = run("diff", inputs / "missing.nks", inputs / "x.nks")
    assert code == 2 and out == "" and err.count("\n") == 1 and "missing.nks" in err
    # in this process (as the script's main): one line, or with --debug the exception itself
    assert cli.main(["diff", str(inputs / "notes.txt"), str(inputs / "x.nks")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nkserde diff: error: ") and "not an nkserde file" in err and err.count("\n") == 1
    with pytest.raises(cli.CommandError) as raised:
        cli.main(["diff", str(inputs / "notes.txt"), str(inputs / "x.nks"), "--debug"])
    assert isinstance(raised.value.__cause__, nkserde.errors.CorruptFileError)


def test_ls_directory_with_damaged_newest(inputs):
    code, data = run_json("ls", inputs / "damaged-dir")
    assert code == 0
    (run_,) = data["runs"]
    assert run_["run"] is None and run_["resume"] == "step-0000000004.nks"
    steps = {c["step"]: c for c in run_["checkpoints"]}
    assert sorted(steps) == [2, 4, 6]
    assert steps[6]["verifies"] is False and "checksum" in steps[6]["problem"] and not steps[6]["resume"]
    assert steps[4]["verifies"] and steps[4]["resume"] and steps[4]["completed_steps"] == 4
    assert steps[4]["size"] == (inputs / "damaged-dir" / "step-0000000004.nks").stat().st_size
    assert steps[4]["driver"] == "netket.driver.VMC" and steps[4]["created"]
    # the last logged energy of the history the checkpoint holds (in the directory's history log)
    path = inputs / "vmc" / "step-0000000004.nks"
    history = histories.resolve(path, nkserde.load_state_dict(path))["loggers"]["RuntimeLog#0"]["history"]
    energy = history[0]
    assert steps[4]["loss"] == {
        "name": "Energy",
        "mean": float(energy["columns"]["Mean"][-1].real),
        "error": float(energy["columns"]["Sigma"][-1]),
        "at": 3.0,
    }
    fingerprint = json.loads((inputs / "vmc" / "fingerprint.json").read_text())
    assert run_["fingerprint"]["fields"] == fingerprint and len(run_["fingerprint"]["digest"]) == 12
    (log,) = run_["history_logs"]
    assert log == {"file": "history-000001.nkh", "size": (inputs / "damaged-dir" / log["file"]).stat().st_size}


def test_ls_checkpointed_directory(inputs):
    code, data = run_json("ls", inputs / "dyn", module=True)
    assert code == 0
    gs, te = data["runs"]
    assert (gs["run"], te["run"]) == (0, 1)
    assert gs["fingerprint"]["fields"]["driver"] == "VMC" and te["fingerprint"]["fields"]["driver"] == "TDVP"
    assert [c["step"] for c in gs["checkpoints"]] == [2, 4] and gs["resume"] == "step-0000000004.nks"
    assert all(c["time"] is None for c in gs["checkpoints"])
    assert [c["time"] for c in te["checkpoints"]] == pytest.approx([0.02, 0.04])
    assert te["checkpoints"][-1]["stopped"] is True  # TDVP reached its final time
    assert te["checkpoints"][-1]["loss"]["name"] == "Generator"


def test_ls_plain_text(inputs):
    code, out, err = run("ls", inputs / "damaged-dir")
    assert code == 0 and err == ""
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("step-")}
    assert "<- resume" in lines["step-0000000004.nks"] and " NO " in lines["step-0000000006.nks"]
    assert "Energy" in lines["step-0000000004.nks"]
    assert "\x1b[" not in out  # no terminal codes in a pipe


def test_ls_not_a_checkpoint_directory(tmp_path, capsys):
    assert cli.main(["ls", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "not a checkpoint directory" in err and err.count("\n") == 1


def test_migrate_dry_run_then_in_place(tmp_path):
    old = tmp_path / "old.nks"
    shutil.copy(FIXTURES / "nkserde-ea7de03" / "vmc_adam.nks", old)
    original = old.read_bytes()
    code, data = run_json("migrate", old, "--dry-run")
    assert code == 0 and data["dry_run"] and not data["up_to_date"]
    changes = {c["type"]: c for c in data["changes"]}
    assert changes["netket.sampler.MetropolisSamplerState"]["to"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.nks"] and old.read_bytes() == original
    code, data = run_json("migrate", old, "--in-place", module=True)
    assert code == 0 and data["backup"] == str(old) + ".bak"
    assert Path(data["backup"]).read_bytes() == original
    types = nkserde.info(old)["types"]
    assert types["netket.sampler.MetropolisSamplerState"] == 2
    assert types["netket.optimizer.IdentityPreconditioner"] == 1
    # the migrated file holds the same state
    assert compare.diff(data["backup"], old)["same"]


def test_migrate_never_overwrites_input(inputs, tmp_path, capsys):
    target = tmp_path / "x.nks"
    shutil.copy(inputs / "x.nks", target)
    before = target.read_bytes()
    assert cli.main(["migrate", str(target), str(target)]) == 1
    assert "--in-place" in capsys.readouterr().err and target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.nks"]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_terminal_output_is_a_tree_with_rich(inputs, monkeypatch):
    # in this process, stdout a terminal: the rich path of inspect and ls
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", "120")
    assert cli.main(["inspect", str(inputs / "dyn" / "run-1" / "step-0000000004.nks")]) == 0
    assert cli.main(["ls", str(inputs / "damaged-dir")]) == 0
    monkeypatch.undo()
    text = re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue())
    assert "\x1b[" in terminal.getvalue()  # styled
    lines = text.splitlines()
    # a tree: the integrator's time under its object, indented, with its type on the object's row
    t = lines.index(next(line for line in lines if line.strip().startswith("t ")))
    assert "netket.utils.KahanSum 1" in lines[t] and lines[t + 1].split()[:2] == ["value", "float64[]"]
    assert any("<- resume" in line and "step-0000000004.nks" in line for line in lines)


def test_non_finite_values_are_strict_json(tmp_path, capsys):
    path = tmp_path / "nan.nks"
    nkserde.save({"energy": np.array([np.nan, -1.0, np.inf]), "last": float("nan")}, path)
    assert cli.main(["inspect", "--arrays", "--json", str(path)]) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    entries = {e["path"]: e for e in data["entries"]}
    assert entries["last"]["value"] == "nan"
    assert entries["energy"]["stats"] == {"of": "value", "min": -1.0, "max": -1.0, "mean": -1.0, "nan": 1, "inf": 1}


def test_contents_of_a_per_process_value():
    # a numpy sampler's state: one value per process (here one process)
    info, entries = file_info.contents(FIXTURES / "netket-3.23.0" / "numpy_sampler.nks")
    per_process = [e for e in entries if e["per_process"] and e["kind"] == "array"]
    assert per_process and all(e["shape"][0] == info["process_count"] == 1 for e in per_process)


def test_ls_without_verifying_and_diff_of_directories(inputs, capsys):
    assert cli.main(["ls", "--no-verify", "--json", str(inputs / "damaged-dir")]) == 0
    (run_,) = json.loads(capsys.readouterr().out)["runs"]
    assert run_["resume"] is None and [c["verifies"] for c in run_["checkpoints"]] == [None] * 3
    assert run_["checkpoints"][-1]["completed_steps"] == 6  # its header still reads
    # a directory stands for its newest checkpoint that verifies: step 4, skipping the damaged 6
    assert cli.main(["diff", str(inputs / "damaged-dir"), str(inputs / "vmc" / "step-0000000004.nks")]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "same"
    assert err.count("\n") == 1 and err.startswith("nkserde diff: warning: ") and "step-0000000006.nks" in err


# What a header reader must not import: seconds of start-up on a login node
# (ml_dtypes alone, JAX's extra dtypes, costs a second of CPU: imported only
# for a file that holds one of them; matplotlib: nkserde plot's alone)
HEAVY = ("jax", "jaxlib", "netket", "flax", "optax", "ml_dtypes", "matplotlib")
PROBE = """
import json, sys
from nkserde.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "heavy": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
""" % (HEAVY,)


def run_probed(*args):
    """The CLI in a new process; (exit code, the heavy modules imported by its exit)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True, timeout=300)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["heavy"]


@pytest.mark.parametrize(
    "command, files",
    [
        (["inspect"], ["vmc/step-0000000004.nks"]),
        (["inspect", "--arrays", "--json"], ["dyn/run-1/step-0000000004.nks"]),
        (["inspect"], ["two-processes.nks"]),
        (["ls"], ["vmc"]),
        (["ls", "--json"], ["dyn"]),
        (["ls"], ["damaged-dir"]),
        (["verify"], ["vmc", "two-processes.nks"]),
        (["verify"], ["damaged.nks"]),
        (["migrate", "--dry-run"], ["driver.nks"]),
        (["history"], ["vmc"]),
        (["history", "--csv"], ["dyn"]),
    ],
    ids=lambda a: " ".join(a),
)
def test_header_commands_import_neither_jax_nor_netket(inputs, command, files):
    code, heavy = run_probed(*command, *(inputs / f for f in files))
    assert code == (1 if files == ["damaged.nks"] else 0)
    assert heavy == [], f"nkserde {' '.join(command + files)} imported {heavy}"


def test_a_file_holding_a_bfloat16_array_imports_ml_dtypes_for_it(tmp_path):
    import ml_dtypes

    path = tmp_path / "bf16.nks"
    nkserde.save({"w": np.arange(4, dtype=ml_dtypes.bfloat16)}, path)
    code, heavy = run_probed("inspect", "--arrays", path)
    assert code == 0 and heavy == ["ml_dtypes"]  # ml_dtypes, for its dtype; still no JAX
    code, data = run_json("inspect", "--arrays", path)
    (w,) = data["entries"]
    assert w["dtype"] == "bfloat16" and w["stats"]["max"] == 3.0


def test_a_dry_run_of_an_old_file_imports_what_its_migration_needs_and_plans_as_the_registry_does(tmp_path):
    old = tmp_path / "old.nks"
    shutil.copy(FIXTURES / "nkserde-ea7de03" / "vmc_adam.nks", old)
    code, heavy = run_probed("migrate", "--dry-run", old)
    assert code == 0 and "netket" in heavy  # the rehearsal of its migrations runs them
    # the plan, from the versions file, is the registry's
    types = nkserde.info(old)["types"]
    from_registry = schema.newer_versions(types, known=schema.current_versions())
    assert from_registry and schema.newer_versions(types) == from_registry


def test_import_nkserde_loads_the_api_on_first_use():
    """``import nkserde`` imports neither JAX nor NetKet; the first API name
    does, with NetKet's types registered, and every name of __all__ is there."""
    script = (
        "import json, sys, nkserde\n"
        f"before = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "from nkserde import *\n"
        "from nkserde.types import registry\n"
        "print(json.dumps({'before': before, 'netket': 'netket' in sys.modules,\n"
        "    'missing': [n for n in nkserde.__all__ if not hasattr(nkserde, n)],\n"
        "    'vmc': registry.lookup_name('netket.driver.VMC') is not None}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(done.stdout) == {"before": [], "netket": True, "missing": [], "vmc": True}


def test_migrate_dry_run_of_a_current_file_says_there_is_nothing_to_migrate(inputs):
    code, out, err = run("migrate", "--dry-run", inputs / "driver.nks")
    assert (code, err) == (0, "")
    assert out == f"{inputs / 'driver.nks'}: already at today's format (2) and schema versions: nothing to migrate\n"


BUILD_SCRIPT = """
import sys
sys.path.insert(0, {fixtures!r})
from scenarios import _vmc


def build_driver():  # the fixture's run, as its script builds it
    return _vmc()


if __name__ == "__main__":
    raise SystemExit("the script's main part ran")
"""


def test_migrate_of_a_file_that_needs_a_template_says_how_and_takes_one(tmp_path):
    old = tmp_path / "old.nks"
    shutil.copy(FIXTURES / "nkserde-a980423" / "vmc_adam.nks", old)  # Metropolis states without log_prob
    code, out, err = run("migrate", old)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "needs the variational state" in err
    assert f'nkserde.migrate("{old}", template=build_driver())' in err
    assert f"nkserde migrate {old} --template your_script.py:build_driver" in err
    script = tmp_path / "my_run.py"
    script.write_text(BUILD_SCRIPT.format(fixtures=str(FIXTURES)))
    code, out, err = here("migrate", "--dry-run", old, "--template", f"{script}:build_driver")
    assert code == 0 and "would rewrite at format 2 (from 1)" in out and "main part ran" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_run.py", "old.nks"]
    code, data = here_json("migrate", old, "--template", f"{script}:build_driver")
    assert code == 0 and Path(data["output"]).name == "old.migrated.nks"
    assert nkserde.info(data["output"])["types"]["netket.sampler.MetropolisSamplerState"] == 2
    code, _, err = here("migrate", "--dry-run", old, tmp_path / "new.nks", "--template", f"{script}:no_such_function")
    assert code == 1 and "defines no function no_such_function" in err


NETKET_FILES = FIXTURES / "netket-files-3.23.0"


def test_inspect_shows_what_a_file_netket_wrote_holds():
    code, data = run_json("inspect", "--arrays", NETKET_FILES / "mcstate.mpack")
    assert code == 0 and data["info"] is None
    assert data["netket_file"] == {"kind": "mpack", "holds": "an MCState (variables, sampler state, sample counts)"}
    entries = {e["path"]: e for e in data["entries"]}
    kernel = entries["variables/params/Dense/kernel"]
    assert (kernel["kind"], kernel["dtype"], kernel["shape"], kernel["nbytes"]) == ("array", "float64", [8, 8], 512)
    truth = np.load(NETKET_FILES / "truth.npz")
    stored = next(k for k in truth.files if "kernel" in k)
    assert kernel["stats"]["max"] == truth[stored].max()
    assert entries["n_samples"] == {"kind": "value", "path": "n_samples", "value": 64}
    code, out, err = run("inspect", NETKET_FILES / "mcstate.nk")
    assert (code, err) == (0, "")
    assert "written by   NetKet (nqxpack): an MCState" in out
    assert f'loads with   nkserde.load(template, "{NETKET_FILES / "mcstate.nk"}")' in out
    assert "no checksums, no schema versions" in out and "variables/params/Dense/kernel" in out


def test_verify_and_ls_of_files_netket_wrote(tmp_path):
    shutil.copy(NETKET_FILES / "variables.mpack", tmp_path / "run.mpack")
    (tmp_path / "run.log").write_text("{}")
    (tmp_path / "cut.mpack").write_bytes((NETKET_FILES / "mcstate.mpack").read_bytes()[:300])
    code, data = run_json("verify", tmp_path / "run.mpack", tmp_path / "cut.mpack")
    assert code == 1
    good, cut = data["files"]
    assert good["ok"] and good["checked"] == "structure" and good["netket_file"]["kind"] == "mpack"
    assert not cut["ok"] and "cut.mpack" in cut["problem"] and cut["checked"] == "structure"
    code, out, _ = run("verify", tmp_path / "run.mpack")
    assert code == 0
    expected = "ok, it decodes: a file NetKet wrote (flax msgpack, an .mpack), which has no checksums to check"
    assert out == f"{tmp_path / 'run.mpack'}: {expected}\n"
    code, data = run_json("ls", tmp_path)
    assert code == 0 and data["runs"] == []
    files = {f["file"]: f for f in data["netket_files"]}
    assert sorted(files) == ["cut.mpack", "run.mpack"]  # not run.log
    assert files["run.mpack"]["holds"].startswith("variables (parameters) alone")
    assert files["cut.mpack"]["holds"] is None and files["cut.mpack"]["problem"]
    code, out, err = run("ls", tmp_path / "run.mpack")
    assert code == 1 and "a file NetKet wrote (flax msgpack, an .mpack); nkserde inspect" in err
    (tmp_path / "empty").mkdir()
    code, out, err = run("ls", tmp_path / "empty")
    assert code == 1 and "no file NetKet wrote in it; nkserde.Checkpoint(DIR) writes checkpoint directories" in err


@pytest.mark.parametrize(
    "command, file",
    [(["inspect", "--arrays"], "mcstate.mpack"), (["inspect"], "mcstate.nk"), (["verify"], "fullsum.nk"), (["ls"], "")],
    ids=lambda a: " ".join(a) if isinstance(a, list) else a,
)
def test_netket_files_are_read_without_jax_or_netket(command, file):
    code, heavy = run_probed(*command, NETKET_FILES / file)
    assert code == 0 and heavy == []


def test_diff_of_two_identical_runs_leaves_the_wall_clock_out(tmp_path):
    for name in ("a", "b"):
        builders.vmc().run(
            2,
            out=nk.logging.RuntimeLog(),
            show_progress=False,
            callback=nkserde.Checkpoint(tmp_path / name, every=2, async_save=False),
        )
    a, b = tmp_path / "a" / "step-0000000002.nks", tmp_path / "b" / "step-0000000002.nks"
    code, data = here_json("diff", a, b, "--atol", "1e-12")
    assert code == 0 and data["same"]
    # the histories are compared whole, read from the history log as a resume reads them
    from nkserde.checkpoint.persist import logger_histories as histories

    history = histories.resolve(a, nkserde.load_state_dict(a))["loggers"]["RuntimeLog#0"]["history"]
    (i,) = [i for i, series in enumerate(history) if series["path"] == ["wallclock"]]
    assert data["exclude"] == [f"loggers/RuntimeLog#0/history/{i}", "history"]
    assert f"loggers/RuntimeLog#0/history/{i}/columns/value" in data["excluded"]
    assert f"loggers/RuntimeLog#0/history/{(i + 1) % len(history)}/columns/value" not in data["excluded"]
    assert "history/id" in data["excluded"]  # a random id per log: differs in two identical runs
    code, out, _ = here("diff", a, b)
    assert code == 0 and out.splitlines()[-1] == "same"
    assert f"left out: {len(data['excluded'])} entries under loggers/RuntimeLog#0/history/{i}, history" in out
    code, data = here_json("diff", a, b, "--wall-clock")
    assert code == 1 and [c["path"] for c in data["changed_values"]] == [
        f"loggers/RuntimeLog#0/history/{i}/columns/value"
    ]
    code, data = here_json("diff", a, b, "--wall-clock", "--exclude", "loggers/*")
    assert code == 0 and data["same"] and all(p.startswith(("loggers/", "history/")) for p in data["excluded"])


def test_history_of_a_run_of_two_processes(inputs):
    """The history process 0's JsonLog logged (its .log file, NetKet's own
    writing), read from the checkpoints the two processes wrote."""
    code, data = run_json("history", inputs / "mp-run" / "ckpt")
    assert code == 0
    (run_,) = data["runs"]
    assert run_["run"] == 0 and run_["checkpoint"].endswith("step-0000000004.nks")
    log = json.loads((inputs / "mp-run" / "out" / "log.log").read_text())
    energy = run_["quantities"]["Energy"]["columns"]
    assert energy["iters"] == log["Energy"]["iters"] == [0, 1, 2, 3]
    assert energy["Mean"] == log["Energy"]["Mean"] and energy["Sigma"] == log["Energy"]["Sigma"]


def test_history_of_a_checkpointed_directory_of_two_runs(inputs, tmp_path):
    # a ground state (run-0), then a TDVP quench (run-1), whose rows are logged at times
    code, data = run_json("history", inputs / "dyn", "--keys", "acceptance,Generator")
    assert code == 0
    gs, te = data["runs"]
    assert (gs["run"], te["run"]) == (0, 1) and gs["restarts"] == te["restarts"] == []
    assert list(gs["quantities"]) == ["acceptance"] and list(te["quantities"]) == ["Generator"]
    assert gs["quantities"]["acceptance"]["columns"]["iters"] == [0, 1, 2, 3]
    assert te["quantities"]["Generator"]["columns"]["iters"] == pytest.approx([0.0, 0.01, 0.02, 0.03])
    with pytest.raises(nkserde.errors.NkserdeError, match="holds the checkpoints of 2 run"):
        nkserde.history(inputs / "dyn")
    assert nkserde.history(inputs / "dyn" / "run-1")["Generator"]["iters"].dtype.kind == "f"


@pytest.mark.plot
def test_plot_of_a_checkpointed_directory_of_two_runs(two_runs, tmp_path):
    code, out, err = here("plot", two_runs, "-o", tmp_path / "dyn.png", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["panels"] == ["Energy", "acceptance", "Generator", "t"]  # each run's, as logged
