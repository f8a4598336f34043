"""``nkserde diff A B``: what differs between two files or checkpoint
directories, as nkserde.cli.compare finds it (which loads and migrates
them: it imports NetKet when it runs); exit 0 same, 1 different, 2 error."""

from __future__ import annotations

import argparse
import json

from ..errors import NkserdeError
from .command_error import CommandError, existing
from .output import Output, format_number, format_shape, format_time, format_versions, print_json


def add_parser(sub) -> argparse.ArgumentParser:
    """``nkserde diff`` and its own arguments (nkserde.cli.commands adds
    the ones every command takes after them)."""
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
    p.set_defaults(func=cmd_diff, error_code=2)  # 1 says the files differ
    return p


def cmd_diff(args) -> int:
    for p in (args.a, args.b):
        existing(p)
    try:
        from . import compare  # loads and migrates: the API, with NetKet

        result = compare.diff(
            args.a, args.b, atol=args.atol, rtol=args.rtol, exclude=args.exclude, wall_clock=args.wall_clock
        )
    except (NkserdeError, OSError) as exc:
        raise CommandError(str(exc)) from exc
    result["atol"], result["rtol"] = args.atol, args.rtol
    if args.json:
        print_json(result)
        return 0 if result["same"] else 1
    out = Output()
    for side in ("a", "b"):
        s = result[side]
        created = format_time(s["info"].get("created"))
        out.line(f"{side.upper()}: {s['path']}  ({format_versions(s['info'])}, created {created})")
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
                [
                    c["path"],
                    format_shape(c),
                    f"{c['differing']}/{c['size']}",
                    format_number(c["max_abs"]),
                    format_number(c["max_rel"]),
                ]
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
