"""``nkserde inspect FILE [--arrays]``: a file's metadata and the tree of
its entries, from its header alone (``--arrays`` reads the arrays too, one
at a time, for their statistics); of a file NetKet wrote, what it holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from rich.text import Text

from ..loading import file_info
from .. import format as fileformat
from ..format import foreign
from .command_error import existing, existing_file
from .output import NBSP, NETKET_FORMATS, Output, format_number, format_shape, format_size, format_time, print_json


def add_parser(sub) -> argparse.ArgumentParser:
    """``nkserde inspect`` and its own arguments (nkserde.cli.commands adds
    the ones every command takes after them)."""
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
    p.set_defaults(func=cmd_inspect)
    return p


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
        print_json({"file": str(path), "size": size, "netket_file": what, "info": None, "entries": entries})
        return 0
    out = Output()
    n = sum(e["kind"] == "array" for e in entries)
    payload = sum(e["nbytes"] for e in entries if e["kind"] == "array")
    out.line(f"{path}  ({format_size(size)}, {n} arrays, {format_size(payload)} of array data)", "bold")
    out.wrapped(f"  written by   NetKet ({NETKET_FORMATS[what['kind']]}): {what['holds']}", 15)
    out.wrapped(
        f'  loads with   nkserde.load(template, "{path}") into an MCState, a FullSumState or a variables dict',
        15,
    )
    out.line("  checks       none stored: no checksums, no schema versions (not an nkserde file)")
    out.line()
    columns = ["path", "dtype[shape]", "bytes"] + (STATS_COLUMNS if args.arrays else [])
    rows = []
    for e in entries:
        if e["kind"] == "array":
            row = [e["path"], format_shape(e), str(e["nbytes"])]
        else:
            row = [e["path"], _value_cell(e["value"]), ""]
        if args.arrays:
            row += _stats_cells(e.get("stats"))
        rows.append(row)
    out.table(columns, rows)
    return 0


def cmd_inspect(args) -> int:
    if foreign.netket_kind(existing(args.file)):
        return _inspect_netket(Path(args.file), args)
    path = existing_file(args.file)
    info, entries = file_info.contents(path)
    if args.arrays:
        by_index = {e["index"]: e for e in entries if e["kind"] == "array"}
        for i, array in fileformat.read_arrays(path, sorted(by_index)):
            by_index[i]["stats"] = array_stats(array)
    if args.json:
        print_json({"file": str(path), "size": path.stat().st_size, "info": info, "entries": entries})
        return 0
    out = Output()
    out.line(
        f"{path}  ({format_size(path.stat().st_size)}, {info['n_arrays']} arrays, "
        f"{format_size(info['payload_bytes'])} of array data)",
        "bold",
    )
    out.wrapped(
        f"  written by   nkserde {info.get('nkserde')}, NetKet {info.get('netket')}, JAX {info.get('jax')}, "
        f"flax {info.get('flax')}, numpy {info.get('numpy')}, Python {info.get('python')}",
        15,
    )
    out.line(f"  format       {info['format_version']} (this nkserde writes {fileformat.FORMAT_VERSION})")
    out.line(f"  created      {format_time(info.get('created'))}")
    out.line(f"  processes    {info.get('process_count')}")
    out.line(f"  root type    {info.get('root_type')}")
    if info.get("migrated_from"):
        m = info["migrated_from"]
        out.line(
            f"  migrated     from format {m.get('format_version')} (nkserde {m.get('nkserde')}, "
            f"NetKet {m.get('netket')}, created {format_time(m.get('created'))})"
        )
    types = info.get("types") or {}
    out.wrapped("  schemas      " + ", ".join(f"{name}{NBSP}{v}" for name, v in sorted(types.items())), 15)
    out.line()
    # in a terminal, a tree: each object's row shows its type (no type column)
    columns = ["path", "dtype[shape] or type" if out.rich else "dtype[shape]", "bytes", "codec"] + (
        [] if out.rich else ["type"]
    )
    if args.arrays:
        columns += STATS_COLUMNS
    rows = []
    for e, label in zip(entries, _labels(entries, tree=out.rich)):
        pp = " per-process" if e["per_process"] else ""
        if e["kind"] == "object" and out.rich:
            row = [label, Text(f"{e['type']} {e['schema_version']}{pp}", "cyan"), "", ""]
        elif e["kind"] == "object":
            row = [label, "", "", "", f"{e['type']} {e['schema_version']}{pp}"]
        elif e["kind"] == "array":
            blocks = f" ({e['blocks']} blocks)" if e["blocks"] > 1 else ""
            row = [label, format_shape(e), str(e["stored_bytes"]), e["codec"] + blocks]
            if not out.rich:
                row.append((f"{e['type']} {e['schema_version']}" if e["type"] else "") + pp)
            elif pp:
                row[-1] += pp
        else:
            row = [label, _value_cell(e["value"]), "", ""] + ([] if out.rich else [""])
        if args.arrays:
            row += _stats_cells(e.get("stats"))
        rows.append(row)
    out.table(columns, rows)
    return 0


STATS_COLUMNS = ["min", "max", "mean", "nan", "inf"]  # --arrays: array_stats of each array


def _stats_cells(stats: dict | None) -> list[str]:
    """The STATS_COLUMNS of an entry's row: its array_stats, or blank."""
    if not stats:
        return [""] * len(STATS_COLUMNS)
    return [format_number(stats[k]) for k in ("min", "max", "mean")] + [str(stats["nan"]), str(stats["inf"])]


def _value_cell(value) -> str:
    """A scalar entry's value in a table: its JSON, cut to 32 characters."""
    text = json.dumps(value)
    return "= " + (text if len(text) <= 32 else text[:29] + "...")


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
