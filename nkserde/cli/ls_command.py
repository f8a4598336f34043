"""``nkserde ls DIR``: the checkpoints of a checkpoint directory (each run
of a checkpointed(...) one), as nkserde.cli.listing reads them, and which
one a resume loads; of a directory without checkpoints, the files NetKet
wrote in it."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..format import foreign
from . import listing
from .command_error import CommandError, existing
from .output import NBSP, NETKET_FORMATS, Output, format_number, format_size, format_time, print_json


def add_parser(sub) -> argparse.ArgumentParser:
    """``nkserde ls`` and its own arguments (nkserde.cli.commands adds
    the ones every command takes after them)."""
    p = sub.add_parser(
        "ls",
        help="the checkpoints of a checkpoint directory, and which one a resume loads",
        description="For a Checkpoint directory, or each run-<i>/ of a checkpointed(...) "
        "directory: the run's fingerprint and each checkpoint's step (and time, "
        "for TDVP), size, creation time, whether it verifies, the last value of "
        "the main loss its logger history holds (e.g. Energy -10.0053 ± 0.0021), "
        "and the one a resume would load: the newest that verifies.",
    )
    p.add_argument("directory", metavar="DIR", help="a checkpoint directory")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="do not read the checkpoints whole to verify them (faster; no resume choice)",
    )
    p.set_defaults(func=cmd_ls)
    return p


def _loss(loss) -> str:
    if not loss:
        return "-"
    error = loss.get("error")
    if not error or not math.isfinite(error) or not math.isfinite(loss["mean"]):
        return f"{loss['name']} {loss['mean']:.6g}"
    digits = max(0, 1 - math.floor(math.log10(abs(error))))  # two significant digits of the error
    return f"{loss['name']} {loss['mean']:.{digits}f} ± {error:.{digits}f}"


def _ls_netket_files(path: Path, found: list[dict], args) -> int:
    """ls of a directory without checkpoints that holds files NetKet
    wrote: each, with what it holds."""
    if args.json:
        print_json({"directory": str(path), "runs": [], "netket_files": found})
        return 0
    out = Output()
    out.wrapped(
        f"{path}: no checkpoints (no step-*.nks, fingerprint.json or run-*/); files NetKet wrote, which "
        "nkserde.load(template, FILE) reads and nkserde inspect FILE shows:",
        2,
    )
    out.table(
        ["file", "format", "size", "holds"],
        [[f["file"], NETKET_FORMATS[f["kind"]], format_size(f["size"]), f["holds"] or f["problem"]] for f in found],
    )
    return 0


def cmd_ls(args) -> int:
    path = existing(args.directory)
    if not path.is_dir():
        kind = foreign.netket_kind(path)
        what = f"a file NetKet wrote ({NETKET_FORMATS[kind]}); " if kind else ""
        raise CommandError(f"{path}: not a directory: {what}nkserde inspect {path} shows a file")
    runs = listing.listing(path, verify=not args.no_verify)
    if not runs:
        found = listing.netket_files(path)
        if found:
            return _ls_netket_files(path, found, args)
        raise CommandError(
            f"{path}: not a checkpoint directory (no step-*.nks, fingerprint.json or run-*/) and no file NetKet "
            "wrote in it; nkserde.Checkpoint(DIR) writes checkpoint directories"
        )
    if args.json:
        print_json({"directory": str(path), "runs": runs})
        return 0
    out = Output()
    for run in runs:
        out.line(f"{run['directory']}" + (f"  (run() call {run['run']})" if run["run"] is not None else ""), "bold")
        fp = run["fingerprint"]
        if fp is None:
            out.line("  fingerprint  none")
        elif fp.get("digest") is None:
            out.line(f"  fingerprint  unreadable: {fp['error']}", "red")
        else:
            f = fp["fields"]
            keys = [k for k in ("driver", "model", "hilbert", "sampler", "n_samples", "integrator.solver") if k in f]
            out.wrapped(f"  fingerprint  {fp['digest']}  (" + ", ".join(f"{k}{NBSP}{f[k]}" for k in keys) + ")", 15)
        dynamics = any(c["time"] is not None for c in run["checkpoints"])
        columns = (
            ["checkpoint", "step"]
            + (["time"] if dynamics else [])
            + ["size", "created", "verifies", "last logged", "resume"]
        )
        rows = []
        for c in run["checkpoints"]:
            verifies = "-" if c["verifies"] is None else "yes" if c["verifies"] else "NO"
            note = "<- resume" if c["resume"] else ""
            if c["stopped"]:
                note = (note + " (finished)").strip()
            row = [c["file"], str(c["step"])] + ([format_number(c["time"])] if dynamics else [])
            row += [format_size(c["size"]), format_time(c["created"]), verifies, _loss(c["loss"]), note]
            rows.append(row)
        if rows:
            out.table(columns, rows)
        else:
            out.line("  no checkpoints")
        if run["history_logs"]:
            logs = ", ".join(f"{log['file']} ({format_size(log['size'])})" for log in run["history_logs"])
            out.line(f"  logger histories in {logs}")
        for c in run["checkpoints"]:
            if c["problem"]:
                out.line(f"  {c['file']}: {c['problem']}", "red")
        if run["checkpoints"] and run["resume"] is None and not args.no_verify:
            out.line("  no checkpoint verifies: a resume starts fresh", "red")
        out.line()
    return 0
