"""The ``nkserde`` command line: inspect, verify, diff, ls and migrate
checkpoints from a shell.

    nkserde inspect FILE [--arrays]   metadata and the tree of entries
    nkserde verify FILE...            every checksum and the structure
    nkserde diff A B [--atol --rtol]  what differs (exit 0 same, 1 different, 2 error)
    nkserde ls DIR                    the checkpoints of a run and which one a resume loads
    nkserde migrate IN [OUT]          rewrite at today's format and schema versions

Every subcommand takes ``--json`` (layout: docs/cli.md). Errors are one line
on stderr and a non-zero exit code; ``--debug`` shows the traceback. Output
uses rich in a terminal and is plain text otherwise (a pipe, a file).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import math
import os
import shutil
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import file_info, schema
from ..checkpoint_files import directory
from .. import format as fileformat
from ..errors import NkserdeError
from ..format import foreign
from ..format.atomic import fsync_directory
from . import listing

# inspect, verify, ls and an up-to-date migrate --dry-run read headers and
# checksums only, without JAX and NetKet (seconds of imports on a login
# node): diff and a migration import them when they run.

JSON_LAYOUT_VERSION = 1  # of every --json output; bumped only when a field changes meaning or goes


NBSP = "\u00a0"  # a space that wrapping does not break at


class CommandError(Exception):
    """An error the command reports in one line (exit code ``code``; None:
    the command's own code for an error, 1 but for diff)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


# output -------------------------------------------------------------------------


class Output:
    """rich in a terminal, plain aligned text otherwise."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.rich = self.stream.isatty()
        self.console = Console(file=self.stream, highlight=False) if self.rich else None

    def line(self, text: str = "", style: str | None = None):
        if self.rich:
            self.console.print(Text(text, style=style))
        else:
            self.stream.write(text + "\n")

    def wrapped(self, text: str, indent: int):
        """A long line; in a terminal wrapped at its width, continued under
        column ``indent``."""
        if not self.rich:
            return self.line(text.replace(NBSP, " "))
        for line in textwrap.wrap(
            text,
            width=max(40, self.console.width - 1),
            subsequent_indent=" " * indent,
            break_on_hyphens=False,
            break_long_words=False,
        ):
            self.line(line.replace(NBSP, " "))

    def table(self, columns, rows, title: str | None = None):
        table = Table(
            box=box.SIMPLE_HEAD if self.rich else None,
            show_edge=False,
            pad_edge=False,
            title=title if self.rich else None,
            title_justify="left",
            show_header=True,
            header_style="bold" if self.rich else None,
        )
        for name in columns:
            right = name in (
                "bytes",
                "size",
                "step",
                "differing",
                "max abs",
                "max rel",
                "min",
                "max",
                "mean",
                "nan",
                "inf",
                "time",
            )
            table.add_column(
                Text(name),
                justify="right" if right else "left",
                overflow="fold",
                no_wrap=name in ("path", "checkpoint"),
            )

        for row in rows:  # Text: a "[...]" in a path or value is not markup
            table.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in row))
        if self.rich:
            self.console.print(table)
            return
        if title:
            self.line(title)
        plain = Console(file=io.StringIO(), width=100_000, no_color=True, highlight=False)
        with plain.capture() as capture:
            plain.print(table)
        self.stream.write("".join(line.rstrip() + "\n" for line in capture.get().splitlines()))


def _strict(value):
    """Strict JSON: non-finite floats (a diverged run's NaN energy) as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def _json(data) -> None:
    json.dump(_strict({"nkserde_json": JSON_LAYOUT_VERSION, **data}), sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _when(iso: str | None) -> str:
    if not isinstance(iso, str):
        return "-"
    try:
        when = datetime.datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _number(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def _shape(entry) -> str:
    return f"{entry['dtype']}[{', '.join(str(d) for d in entry['shape'])}]"


def _existing(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise CommandError(f"{path}: no such file or directory")
    return p


def _file(path: str) -> Path:
    p = _existing(path)
    if p.is_dir():
        raise CommandError(f"{path}: is a directory (nkserde ls lists a checkpoint directory)")
    return p


def _versions(info: dict) -> str:
    return (
        f"format {info.get('format_version')}, nkserde {info.get('nkserde')}, NetKet {info.get('netket')}, "
        f"JAX {info.get('jax')}"
    )


# inspect ------------------------------------------------------------------------


def array_stats(a: np.ndarray) -> dict:
    """min, max, mean and the counts of NaN and infinite elements of an
    array; for a complex array min and max are of ``|a|`` (``"of": "abs"``)
    and ``mean_imag`` is the imaginary part of the mean. Floats that are not
    finite are given as strings ("nan", "inf")."""
    out = {"of": "value", "min": None, "max": None, "mean": None, "nan": 0, "inf": 0}
    if a.dtype.kind == "c":
        x = a.astype(np.complex128)
        out["of"] = "abs"
    elif a.dtype.kind in "biuf" or a.dtype.name.startswith(("bfloat", "float8", "int4", "uint4")):
        x = a.astype(np.float64)
    else:
        return out
    out["nan"] = int(np.count_nonzero(np.isnan(x)))
    out["inf"] = int(np.count_nonzero(np.isinf(x)))
    finite = x[np.isfinite(x)]
    if finite.size:
        magnitude = np.abs(finite) if out["of"] == "abs" else finite
        mean = finite.mean()
        out.update(min=float(magnitude.min()), max=float(magnitude.max()), mean=float(np.real(mean)))
        if out["of"] == "abs":
            out["mean_imag"] = float(np.imag(mean))
    return out


NETKET_FORMATS = {"mpack": "flax msgpack, an .mpack", "nqxpack": "nqxpack"}


def _disk_size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _inspect_netket(path: Path, args) -> int:
    """inspect of a file NetKet wrote: what it holds, read whole (it has no
    header to read alone), and how nkserde loads it."""
    what, entries, arrays = file_info.netket_contents(path)
    if args.arrays:
        for e in entries:
            if e["kind"] == "array":
                e["stats"] = array_stats(arrays[e["index"]])
    size = _disk_size(path)
    if args.json:
        _json({"file": str(path), "size": size, "netket_file": what, "info": None, "entries": entries})
        return 0
    out = Output()
    n = sum(e["kind"] == "array" for e in entries)
    payload = sum(e["nbytes"] for e in entries if e["kind"] == "array")
    out.line(f"{path}  ({_size(size)}, {n} arrays, {_size(payload)} of array data)", "bold")
    out.wrapped(f"  written by   NetKet ({NETKET_FORMATS[what['kind']]}): {what['holds']}", 15)
    out.wrapped(
        f'  loads with   nkserde.load(template, "{path}") into an MCState, a FullSumState or a variables dict',
        15,
    )
    out.line("  checks       none stored: no checksums, no schema versions (not an nkserde file)")
    out.line()
    columns = ["path", "dtype[shape]", "bytes"] + (["min", "max", "mean", "nan", "inf"] if args.arrays else [])
    rows = []
    for e in entries:
        if e["kind"] == "array":
            row = [e["path"], _shape(e), str(e["nbytes"])]
            if args.arrays:
                st = e["stats"]
                row += [_number(st["min"]), _number(st["max"]), _number(st["mean"]), str(st["nan"]), str(st["inf"])]
        else:
            value = json.dumps(e["value"])
            row = [e["path"], "= " + (value if len(value) <= 32 else value[:29] + "..."), ""]
            row += [""] * 5 if args.arrays else []
        rows.append(row)
    out.table(columns, rows)
    return 0


def cmd_inspect(args) -> int:
    if foreign.netket_kind(_existing(args.file)):
        return _inspect_netket(Path(args.file), args)
    path = _file(args.file)
    info, entries = file_info.contents(path)
    if args.arrays:
        by_index = {e["index"]: e for e in entries if e["kind"] == "array"}
        for i, array in fileformat.read_arrays(path, sorted(by_index)):
            by_index[i]["stats"] = array_stats(array)
    if args.json:
        _json({"file": str(path), "size": path.stat().st_size, "info": info, "entries": entries})
        return 0
    out = Output()
    out.line(
        f"{path}  ({_size(path.stat().st_size)}, {info['n_arrays']} arrays, "
        f"{_size(info['payload_bytes'])} of array data)",
        "bold",
    )
    out.wrapped(
        f"  written by   nkserde {info.get('nkserde')}, NetKet {info.get('netket')}, JAX {info.get('jax')}, "
        f"flax {info.get('flax')}, numpy {info.get('numpy')}, Python {info.get('python')}",
        15,
    )
    out.line(f"  format       {info['format_version']} (this nkserde writes {fileformat.FORMAT_VERSION})")
    out.line(f"  created      {_when(info.get('created'))}")
    out.line(f"  processes    {info.get('process_count')}")
    out.line(f"  root type    {info.get('root_type')}")
    if info.get("migrated_from"):
        m = info["migrated_from"]
        out.line(
            f"  migrated     from format {m.get('format_version')} (nkserde {m.get('nkserde')}, "
            f"NetKet {m.get('netket')}, created {_when(m.get('created'))})"
        )
    types = info.get("types") or {}
    out.wrapped("  schemas      " + ", ".join(f"{name}{NBSP}{v}" for name, v in sorted(types.items())), 15)
    out.line()
    # in a terminal, a tree: each object's row shows its type (no type column)
    columns = ["path", "dtype[shape] or type" if out.rich else "dtype[shape]", "bytes", "codec"] + (
        [] if out.rich else ["type"]
    )
    if args.arrays:
        columns += ["min", "max", "mean", "nan", "inf"]
    rows = []
    for e, label in zip(entries, _labels(entries, tree=out.rich)):
        pp = " per-process" if e["per_process"] else ""
        if e["kind"] == "object" and out.rich:
            row = [label, Text(f"{e['type']} {e['schema_version']}{pp}", "cyan"), "", ""]
        elif e["kind"] == "object":
            row = [label, "", "", "", f"{e['type']} {e['schema_version']}{pp}"]
        elif e["kind"] == "array":
            blocks = f" ({e['blocks']} blocks)" if e["blocks"] > 1 else ""
            row = [label, _shape(e), str(e["stored_bytes"]), e["codec"] + blocks]
            if not out.rich:
                row.append((f"{e['type']} {e['schema_version']}" if e["type"] else "") + pp)
            elif pp:
                row[-1] += pp
        else:
            value = json.dumps(e["value"])
            row = [label, "= " + (value if len(value) <= 32 else value[:29] + "..."), "", ""] + (
                [] if out.rich else [""]
            )
        if args.arrays:
            s = e.get("stats")
            row += (
                [_number(s["min"]), _number(s["max"]), _number(s["mean"]), str(s["nan"]), str(s["inf"])]
                if s
                else [""] * 5
            )
        rows.append(row)
    out.table(columns, rows)
    return 0


def _labels(entries, tree: bool) -> list[str]:
    """Full paths (plain text: one greppable line per entry), or in a
    terminal a tree: each entry indented under the object holding it, with
    its path relative to that object."""
    if not tree:
        return [e["path"] for e in entries]
    labels, stack = [], []  # paths of the enclosing objects
    for e in entries:
        parts = e["path"].split("/")
        while stack and parts[: len(stack[-1])] != stack[-1]:
            stack.pop()
        relative = "/".join(parts[len(stack[-1]) :]) if stack else e["path"]
        labels.append("  " * len(stack) + relative)
        if e["kind"] == "object":
            stack.append(parts)
    return labels


# verify -------------------------------------------------------------------------


def _verify_targets(paths) -> list[Path]:
    files = []
    for name in paths:
        p = Path(name)
        if p.is_dir() and not foreign.netket_kind(p):
            found = [
                directory.step_path(d, s) for _, d in directory.checkpoint_directories(p) for s in directory.steps(d)
            ]
            files += found or [p]  # an empty directory is reported as a problem
        else:
            files.append(p)
    return files


def cmd_verify(args) -> int:
    results = []
    for path in _verify_targets(args.files):
        info, netket, checked = None, None, "checksums"
        if not path.exists():
            problem = f"{path}: no such file or directory"
        elif (kind := foreign.netket_kind(path)) is not None:
            # no checksums to check: what can be checked is that it decodes whole
            checked = "structure"
            try:
                netket = file_info.netket_contents(path)[0]
                problem = None
            except (NkserdeError, OSError) as exc:
                netket, problem = {"kind": kind, "holds": None}, " ".join(str(exc).split())
        elif path.is_dir():
            problem = f"{path}: a directory without checkpoints"
        else:
            problem = directory.problem(path)
        if problem is None and netket is None:
            info = file_info.info(path)
        results.append(
            {
                "file": str(path),
                "ok": problem is None,
                "problem": problem,
                "info": info,
                "checked": checked,
                "netket_file": netket,
            }
        )
    ok = all(r["ok"] for r in results)
    if args.json:
        _json({"ok": ok, "files": results})
    else:
        out = Output()
        for r in results:
            if r["ok"] and r["netket_file"]:
                kind = NETKET_FORMATS[r["netket_file"]["kind"]]
                out.line(
                    f"{r['file']}: ok, it decodes: a file NetKet wrote ({kind}), which has no checksums to check",
                    "green",
                )
            elif r["ok"]:
                out.line(f"{r['file']}: ok", "green")
            else:
                out.line(f"{r['file']}: {r['problem'].removeprefix(r['file'] + ': ')}", "red")
    return 0 if ok else 1


# diff ---------------------------------------------------------------------------


def cmd_diff(args) -> int:
    for p in (args.a, args.b):
        _existing(p)
    try:
        from . import compare  # loads and migrates: the API, with NetKet

        result = compare.diff(
            args.a, args.b, atol=args.atol, rtol=args.rtol, exclude=args.exclude, wall_clock=args.wall_clock
        )
    except (NkserdeError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    result["atol"], result["rtol"] = args.atol, args.rtol
    if args.json:
        _json(result)
        return 0 if result["same"] else 1
    out = Output()
    for side in ("a", "b"):
        s = result[side]
        out.line(f"{side.upper()}: {s['path']}  ({_versions(s['info'])}, created {_when(s['info'].get('created'))})")
        for k in s["kept_versions"]:
            out.line(
                f"   {k['path']}: {k['type']} compared at its stored schema version {k['schema_version']} "
                "(its migration needs a template)",
                "yellow",
            )
    for side in ("a", "b"):
        for p in result[f"only_in_{side}"]:
            out.line(f"only in {side.upper()}: {p}", "yellow")
    for c in result["changed_layout"]:
        out.line(f"layout: {c['path']}: {_layout(c['a'])} -> {_layout(c['b'])}", "yellow")
    for c in result["changed_scalars"]:
        out.line(f"value: {c['path']}: {json.dumps(c['a'])} -> {json.dumps(c['b'])}", "yellow")
    if result["changed_values"]:
        out.table(
            ["path", "dtype[shape]", "differing", "max abs", "max rel"],
            [
                [c["path"], _shape(c), f"{c['differing']}/{c['size']}", _number(c["max_abs"]), _number(c["max_rel"])]
                for c in result["changed_values"]
            ],
            title=f"arrays whose values differ (atol={args.atol:g}, rtol={args.rtol:g})",
        )
    if result["excluded"]:
        out.wrapped(
            f"left out: {len(result['excluded'])} entries under "
            + ", ".join(result["exclude"])
            + _not_state(args.wall_clock, "history" in result["exclude"]),
            2,
        )
    n = sum(len(result[k]) for k in ("only_in_a", "only_in_b", "changed_layout", "changed_values", "changed_scalars"))
    out.line("same" if result["same"] else f"{n} differences", "green" if result["same"] else "bold red")
    return 0 if result["same"] else 1


def _not_state(wall_clock: bool, history: bool) -> str:
    """Why diff left out what it did by itself."""
    reasons = ([] if wall_clock else ["a logged wall-clock series (--wall-clock compares it)"]) + (
        ["history, which history log and where it ended"] if history else []
    )
    return f" (not state: {'; '.join(reasons)})" if reasons else ""


def _layout(x: dict) -> str:
    return x["dtype"] if x["shape"] is None else f"{x['dtype']}[{', '.join(map(str, x['shape']))}]"


# ls -----------------------------------------------------------------------------


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
        _json({"directory": str(path), "runs": [], "netket_files": found})
        return 0
    out = Output()
    out.wrapped(
        f"{path}: no checkpoints (no step-*.nks, fingerprint.json or run-*/); files NetKet wrote, which "
        "nkserde.load(template, FILE) reads and nkserde inspect FILE shows:",
        2,
    )
    out.table(
        ["file", "format", "size", "holds"],
        [[f["file"], NETKET_FORMATS[f["kind"]], _size(f["size"]), f["holds"] or f["problem"]] for f in found],
    )
    return 0


def cmd_ls(args) -> int:
    path = _existing(args.directory)
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
        _json({"directory": str(path), "runs": runs})
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
            row = [c["file"], str(c["step"])] + ([_number(c["time"])] if dynamics else [])
            row += [_size(c["size"]), _when(c["created"]), verifies, _loss(c["loss"]), note]
            rows.append(row)
        if rows:
            out.table(columns, rows)
        else:
            out.line("  no checkpoints")
        if run["history_logs"]:
            logs = ", ".join(f"{log['file']} ({_size(log['size'])})" for log in run["history_logs"])
            out.line(f"  logger histories in {logs}")
        for c in run["checkpoints"]:
            if c["problem"]:
                out.line(f"  {c['file']}: {c['problem']}", "red")
        if run["checkpoints"] and run["resume"] is None and not args.no_verify:
            out.line("  no checkpoint verifies: a resume starts fresh", "red")
        out.line()
    return 0


# migrate ------------------------------------------------------------------------


def _planned_changes(path: Path) -> tuple[dict, list[dict]]:
    info = file_info.info(path)
    return info, schema.newer_versions(info.get("types") or {})


def _backup_path(path: Path) -> Path:
    candidate = path.with_name(path.name + ".bak")
    i = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak{i}")
        i += 1
    return candidate


def _make_durable(path: Path) -> None:
    """fsyncs ``path`` and its directory entry."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    fsync_directory(path.parent)


def cmd_migrate(args) -> int:
    src = _file(args.input)
    if args.in_place and args.output:
        raise CommandError("give OUT or --in-place, not both")
    dst = src if args.in_place else Path(args.output) if args.output else file_info.migrated_path(src)
    if not args.in_place and dst.exists() and dst.resolve() == src.resolve():
        raise CommandError(f"{src}: OUT is IN; migrate never overwrites IN unless --in-place (which keeps a backup)")
    if not args.in_place and dst.exists() and not args.force:
        raise CommandError(f"{dst}: exists; pass --force to replace it")
    info, changes = _planned_changes(src)
    result = {
        "input": str(src),
        "output": str(dst),
        "dry_run": args.dry_run,
        "backup": None,
        "format_version": {"from": info["format_version"], "to": fileformat.FORMAT_VERSION},
        "changes": changes,
    }
    result["up_to_date"] = not changes and info["format_version"] == fileformat.FORMAT_VERSION
    template = _template(args.template) if args.template else None
    if args.dry_run:
        if template is not None:
            from .. import api

            api.load(template, src)  # raises now what the migration would raise
        elif not result["up_to_date"]:
            from ..file_migration import current_state_dict

            current_state_dict(src)  # raises now what the migration would raise
    else:
        from ..file_migration import migrate as migrate_file

        if args.in_place:
            backup = _backup_path(src)
            shutil.copy2(src, backup)
            _make_durable(backup)  # a power cut must not leave IN migrated and its backup torn
            result["backup"] = str(backup)
            try:
                migrate_file(src, overwrite=True, template=template)
            except BaseException:
                backup.unlink()
                raise
        else:
            migrate_file(src, dst, template=template)
    if args.json:
        _json(result)
        return 0
    out = Output()
    today = f"today's format ({fileformat.FORMAT_VERSION}) and schema versions"
    backup = f"; backup {result['backup']}" if result["backup"] else ""
    if result["up_to_date"] and args.dry_run:
        out.line(f"{src}: already at {today}: nothing to migrate")
    elif result["up_to_date"]:
        out.line(f"{src}: already at {today}; written again to {dst}{backup}")
    else:
        verb = "would rewrite" if args.dry_run else "rewrote"
        out.line(
            f"{src}: {verb} at format {fileformat.FORMAT_VERSION} (from {info['format_version']}) -> {dst}{backup}"
        )
    for c in changes:
        rename = f" -> {c['new_type']}" if c["new_type"] != c["type"] else ""
        out.line(f"  {c['type']}{rename}: schema {c['from']} -> {c['to']}")
    return 0


def _template(spec: str):
    """The object ``--template SCRIPT.py:FUNCTION`` (or ``MODULE:FUNCTION``)
    builds: the script's top level runs (not its ``if __name__ ==
    "__main__":`` part), then FUNCTION() is called."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise CommandError(f"--template {spec}: give SCRIPT.py:FUNCTION or MODULE:FUNCTION", code=2)
    if where.endswith(".py") or Path(where).is_file():
        import runpy

        if not Path(where).is_file():
            raise CommandError(f"--template {spec}: {where}: no such file")
        sys.path.insert(0, str(Path(where).resolve().parent))  # the script's own imports, as python runs it
        namespace = runpy.run_path(where, run_name="__nkserde_template__")
    else:
        import importlib

        namespace = vars(importlib.import_module(where))
    if not callable(namespace.get(name)):
        raise CommandError(f"--template {spec}: {where} defines no function {name}")
    return namespace[name]()


# the parser ---------------------------------------------------------------------


EPILOG = """exit codes: 0 success; 1 a problem was found (verify: a file does not verify; diff: the files
differ) or the command failed; 2 usage errors, and diff's errors (diff's convention).
--json layouts: docs/cli.md."""


def _common(p: argparse.ArgumentParser):
    p.add_argument("--json", action="store_true", help="machine-readable output (layout: docs/cli.md)")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nkserde",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
        description="Inspect, verify, compare, list and migrate nkserde files and checkpoint "
        "directories, without writing Python.",
    )
    parser.add_argument("--version", action="version", version=f"nkserde {_version()}")
    parser.set_defaults(error_code=1)  # an error's exit code; diff's is 2
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "inspect",
        help="metadata and the tree of entries of a file (reads the header only)",
        description="Metadata (format version, nkserde/NetKet/JAX versions that wrote the file, "
        "creation time, process count, root type, schema versions) and every entry: "
        "path, dtype, shape, bytes on disk, codec, stored type and schema version. "
        "Reads the header only, so a file of any size inspects at once.",
    )
    p.add_argument("file", metavar="FILE", help="an nkserde file (e.g. ckpt/run-0/step-0000000030.nks)")
    p.add_argument(
        "--arrays",
        action="store_true",
        help="read the arrays too and add min/max/mean and the counts of NaN and inf "
        "(complex arrays: min/max of the absolute value)",
    )
    _common(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "verify",
        help="check every checksum and the structure; exit 1 if any file fails",
        description="Reads each file whole and checks the header, every array checksum and "
        "the structure. Prints one line per file: ok, or the problem. A checkpoint "
        "directory stands for all its checkpoints. Exit 0 when all are good, 1 "
        "otherwise.",
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="files or checkpoint directories")
    _common(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser(
        "diff",
        help="compare two files; exit 0 same, 1 different, 2 error",
        description="Entries present in one file only, entries whose dtype or shape differ, "
        "scalars that differ, and for arrays whose values differ the max absolute "
        "and relative difference and the count of differing elements. Both files "
        "are read at today's schema versions, so files of different format or "
        "schema versions compare. A checkpoint compared with a file of its driver "
        "compares the driver. A directory stands for its newest checkpoint that "
        "verifies. Elements differ where |a - b| > atol + rtol * |b| (NaN equals "
        "NaN). The wall-clock series of the loggers' histories are left out (--wall-clock), "
        "and any path given to --exclude. Exit 0 same, 1 different, 2 error.",
    )
    p.add_argument("a", metavar="A", help="a file or checkpoint directory")
    p.add_argument("b", metavar="B", help="a file or checkpoint directory")
    p.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default: 0, exact)")
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default: 0, exact)")
    p.add_argument(
        "--exclude",
        metavar="PATH",
        action="append",
        default=[],
        help="leave out the entries at PATH and under it, a pattern where * matches any part "
        "(e.g. 'loggers/*', 'driver/state/sampler_state'); may be given again",
    )
    p.add_argument(
        "--wall-clock",
        action="store_true",
        help="compare the wall-clock series of the loggers' histories too (NetKet logs each step's "
        "time.perf_counter() as 'wallclock'; left out by default: it differs between two identical runs)",
    )
    _common(p)
    p.set_defaults(func=cmd_diff, error_code=2)  # 1 says the files differ

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
    _common(p)
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser(
        "migrate",
        help="rewrite a file at today's format and schema versions",
        description="Rewrites IN at today's file format and schema versions (nkserde.migrate), "
        "atomically, to OUT (default: <stem>.migrated<suffix> beside IN). Never "
        "overwrites IN unless --in-place, which first copies it to IN.bak.",
    )
    p.add_argument("input", metavar="IN", help="an nkserde file")
    p.add_argument("output", metavar="OUT", nargs="?", help="where to write")
    p.add_argument("--dry-run", action="store_true", help="list what would change; write nothing")
    p.add_argument("--in-place", action="store_true", help="replace IN, keeping a backup IN.bak")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument(
        "--template",
        metavar="SCRIPT.py:FUNCTION",
        help="the template, for a migration that needs one (a Metropolis sampler state of schema 1): "
        "FUNCTION() of your script builds it, as for nkserde.migrate(..., template=); the script's "
        'top level runs, its `if __name__ == "__main__":` part does not (MODULE:FUNCTION works too)',
    )
    _common(p)
    p.set_defaults(func=cmd_migrate)
    return parser


def _version() -> str:
    from .. import __version__

    return __version__


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or text}"
    return text or type(exc).__name__


def main(argv=None) -> int:
    """The console script ``nkserde`` and ``python -m nkserde``."""
    parser = build_parser()
    args = parser.parse_args(argv)

    def warn(message, category, filename, lineno, file=None, line=None):
        # e.g. "skipping checkpoint ...: why": one line, like the errors
        print(f"nkserde {args.command}: warning: {_one_line(message)}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = warn
        return _run(args)


def _run(args) -> int:
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `nkserde inspect ... | head`
        sys.stderr.close()
        return 0
    except Exception as exc:
        if args.debug:
            raise
        code = exc.code if isinstance(exc, CommandError) and exc.code is not None else args.error_code
        print(f"nkserde {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return code
