"""``nkserde history DIR|FILE``: every quantity a run's loggers logged, at
every step, across its restarts (nkserde.checkpoint.persist.run_history
reads it): a table of the last rows, ``--csv`` or ``--json``, with each
restart said and its rows marked; and the choice of quantities (``--keys``)
that ``nkserde plot`` shares. Reads headers, loggers and history logs,
without JAX or NetKet; exit 2 on an error (a directory that holds no
checkpoint, a key never logged)."""

from __future__ import annotations

import argparse
import csv
import fnmatch
import math
import sys

import numpy as np

from ..checkpoint.persist import run_history
from .command_error import CommandError, existing
from .output import Output, print_json

ITERS = run_history.ITERS


def add_parser(sub) -> argparse.ArgumentParser:
    """``nkserde history`` and its own arguments (nkserde.cli.commands adds
    the ones every command takes after them)."""
    p = sub.add_parser(
        "history",
        help="every logged quantity per step, across restarts: a table, CSV or JSON",
        description="What the run's loggers (RuntimeLog, JsonLog) logged at every step, read from its "
        "checkpoint directory: the history of the newest checkpoint that reads, every step "
        "once, across every restart, as the loggers logged it (numbers written to be read "
        "back bit for bit); where each restart began, and the steps known to have been run "
        "again. Reads without taking the directory's lock, while the run writes too. A "
        "checkpoint file gives the history up to it. Exit 0, or 2 on an error.",
    )
    p.add_argument("path", metavar="DIR", help="a checkpoint directory (or one checkpoint file)")
    add_keys_argument(p)
    rows = p.add_mutually_exclusive_group()
    rows.add_argument("--last", type=int, default=20, metavar="N", help="the last N rows of the table (default 20)")
    rows.add_argument("--all", action="store_true", help="every row of the table")
    p.add_argument("--csv", action="store_true", help="every row as CSV on stdout, a column per logged field")
    p.set_defaults(func=cmd_history, error_code=2)
    return p


def add_keys_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keys",
        metavar="KEY",
        action="append",
        default=[],
        help="the quantities to show: a logged name (Energy), a field of one (Energy/Variance) or a "
        "pattern (obs/*); comma-separated or given again (default: all)",
    )


def read(args) -> list:
    """The histories of ``args.path``, each with the quantities the keys
    name: ``[(RunHistory, select(...))]``; a key that names nothing of any
    of them is a CommandError (exit 2)."""
    existing(args.path)
    found = run_history.histories(args.path)
    if not any(len(h) for h in found):
        raise CommandError(
            f"{args.path}: its checkpoints hold no logged history (a RuntimeLog or JsonLog of run(out=...) keeps one)"
        )
    keys = [k.strip() for given in args.keys for k in given.split(",") if k.strip()]
    for key in keys:  # each key names something of some run (of a checkpointed(...) directory's)
        if not any(_matches(h, name, key) for h in found for name in h):
            logged = dict.fromkeys(name for h in found for name in h)
            raise CommandError(f"{args.path}: {key} was never logged (logged: {', '.join(logged)})")
    return [(h, select(h, keys)) for h in found]


def _matches(h, name: str, key: str) -> bool:
    return fnmatch.fnmatchcase(name, key) or any(
        field != ITERS and fnmatch.fnmatchcase(f"{name}/{field}", key) for field in h[name]
    )


def select(h, keys: list[str]) -> dict:
    """``{name: [None or field, ...]}``, the quantities of ``h`` the keys
    name, in logged order: None for a quantity named whole (all its fields;
    in a plot its value), a field named alone (``name/field``); keys may be
    patterns of either; every quantity whole without keys."""
    if not keys:
        return {name: [None] for name in h}
    chosen: dict = {}
    for key in keys:
        for name in h:
            if fnmatch.fnmatchcase(name, key):
                if None not in chosen.setdefault(name, []):
                    chosen[name].append(None)
                continue
            for field in h[name]:
                if field != ITERS and fnmatch.fnmatchcase(f"{name}/{field}", key) and field not in chosen.get(name, []):
                    chosen.setdefault(name, []).append(field)
    return {name: chosen[name] for name in h if name in chosen}


def columns_of(h, chosen: dict) -> list[tuple[str, str, str]]:
    """(column name, quantity, field) of the chosen fields, in logged order."""
    out = []
    for name, wanted in chosen.items():
        logged = [f for f in h[name] if f != ITERS]
        for column, field in zip(h.column_names(name), logged):
            if None in wanted or field in wanted:
                out.append((column, name, field))
    return out


# ------------------------------------------------------------------ values as text


def cell(value) -> str:
    """A logged value as text that reads back to the same number: the
    shortest decimal of a float (``float(text)`` gives it back, float32
    included), a complex as Python writes it (``complex(text)``) unless its
    imaginary part is +0.0, arrays as ``[a, b, ...]``."""
    if isinstance(value, np.ndarray):
        return "[" + ", ".join(cell(v) for v in value.tolist()) + "]" if value.ndim else cell(value.item())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or isinstance(value, int):
        return str(value)
    if isinstance(value, complex):
        if value.imag == 0 and math.copysign(1.0, value.imag) > 0:
            return repr(value.real)
        return repr(value).strip("()")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(cell(v) for v in value) + "]"
    return str(value)


def _marks(h, iters: np.ndarray) -> tuple[list[int], list[bool]]:
    """Per row: how many restarts came before it was logged, and whether
    it was logged before a restart too (as far as the logs show)."""
    values = iters.tolist()
    count = [0] * len(values)
    redone = [False] * len(values)
    for r in h.restarts:
        for i, v in enumerate(values):
            if r.at is not None and v >= r.at:
                count[i] += 1
            if r.redone is not None and r.redone[0] <= v <= r.redone[1]:
                redone[i] = True
    return count, redone


def _table_rows(h, chosen: dict, last: int | None = None):
    """(column names, rows of cells, restarts-before per row, redone per
    row, every row's ``iters``): the last ``last`` rows (all by default),
    the others not written out."""
    columns = columns_of(h, chosen)
    iters, rows = h.rows(list(chosen))
    start = 0 if last is None else max(0, len(iters) - last)
    cells = [[cell(v)] + [""] * len(columns) for v in iters[start:].tolist()]
    for j, (_, name, field) in enumerate(columns, start=1):
        shown = rows[name] >= start
        for row, value in zip((rows[name][shown] - start).tolist(), h[name][field][shown]):
            cells[row][j] = cell(value)
    count, redone = _marks(h, iters[start:])
    return [ITERS] + [c for c, _, _ in columns], cells, count, redone, iters


# ------------------------------------------------------------------ the command


def cmd_history(args) -> int:
    found = read(args)
    if args.json:
        print_json({"path": str(args.path), "runs": [_json_run(h, chosen) for h, chosen in found]})
    elif args.csv:
        _write_csv(found)
    else:
        out = Output()
        for h, chosen in found:
            _print_run(out, h, chosen, None if args.all else max(0, args.last))
    return 0


def _json_run(h, chosen: dict) -> dict:
    quantities = {}
    for name, wanted in chosen.items():
        columns = {f: _json_column(a) for f, a in h[name].items() if f == ITERS or None in wanted or f in wanted}
        quantities[name] = {"main": h.main(name), "columns": columns}
    return {
        "directory": str(h.directory),
        "run": h.run,
        "checkpoint": str(h.checkpoint),
        "quantities": quantities,
        "restarts_recorded": h.restarts_recorded,
        "restarts": [{"step": r.step, "at": r.at, "redone": list(r.redone) if r.redone else None} for r in h.restarts],
    }


def _json_column(a: np.ndarray):
    """As NetKet's JsonLog writes it: complex as ``{"real": [...], "imag": [...]}``."""
    if a.dtype.kind == "c":
        return {"real": a.real.tolist(), "imag": a.imag.tolist()}
    return a.tolist()


def _write_csv(found) -> None:
    several = len(found) > 1
    writer = csv.writer(sys.stdout, lineterminator="\n")
    header_written = False
    for h, chosen in found:
        if not chosen:
            continue
        names, cells, count, redone, _ = _table_rows(h, chosen)
        if not header_written:
            writer.writerow((["run"] if several else []) + names + ["restart", "redone"])
            header_written = True
        for row, n, again in zip(cells, count, redone):
            writer.writerow(([h.run] if several else []) + row + [n, int(again)])


def _print_run(out: Output, h, chosen: dict, last: int | None) -> None:
    title = f"{h.directory}" + (f"  (run() call {h.run})" if h.run is not None else "")
    out.line(title + f"  from {h.checkpoint.name}", "bold")
    if not chosen:
        out.line("  none of the keys was logged in this run")
        out.line()
        return
    names, cells, _, redone, iters = _table_rows(h, chosen, last)
    total = len(iters)
    steps = f"{total} rows" + (f", iters {cell(iters[0])} to {cell(iters[-1])}" if total else "")
    out.line(f"  {steps}; {restarts_said(len(h.restarts), h.restarts_recorded)}")
    for i, r in enumerate(h.restarts, start=1):
        out.wrapped(f"  restart {i}: {_restart_line(r)}", 4)
    if h.restarts:
        out.wrapped(
            "  (what a killed run did after its last checkpoint is in no file: it is run again after the "
            "restart; each step is shown once, as the run that went on logged it)",
            4,
        )
    notes = [_note(h, row[0], again) for row, again in zip(cells, redone)]
    if any(notes):
        out.table(names + ["note"], [row + [note] for row, note in zip(cells, notes)])
    else:
        out.table(names, cells)
    if len(cells) < total:
        out.line(f"  (the last {len(cells)} of {total} rows; --all shows every row, --csv writes them)")
    out.line()


def restarts_said(n: int, recorded: bool = True) -> str:
    if not recorded:
        return "restarts not recorded (its loggers hold their histories whole: no history log says)"
    return "no restart" if n == 0 else "1 restart" if n == 1 else f"{n} restarts"


def _restart_line(r) -> str:
    began = f"logged from iters {cell(r.at)} on" if r.at is not None else "nothing logged since"
    again = (
        f"; iters {cell(r.redone[0])} to {cell(r.redone[1])} had been logged before it and were run again"
        if r.redone is not None
        else ""
    )
    resumed = "resumed a checkpoint" if r.step is None else f"resumed the checkpoint of step {r.step}"
    return f"{resumed}, {began}{again}"


def _note(h, first: str, redone: bool) -> str:
    """The marks of a row: the restart its rows begin at, run again."""
    notes = [f"<- restart {i}" for i, r in enumerate(h.restarts, start=1) if r.at is not None and cell(r.at) == first]
    if redone:
        notes.append("run again")
    return ", ".join(notes)
