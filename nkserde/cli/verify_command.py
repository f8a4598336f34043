"""``nkserde verify FILE|DIR ...``: every checksum and the structure of
each file (a checkpoint directory stands for its checkpoints), one line per
file; exit 1 if any fails. A file NetKet wrote, having no checksums, is
checked to decode whole."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..loading import file_info
from ..checkpoint_files import directory
from ..errors import NkserdeError
from ..format import foreign
from .output import NETKET_FORMATS, Output, print_json


def add_parser(sub) -> argparse.ArgumentParser:
    """``nkserde verify`` and its own arguments (nkserde.cli.commands adds
    the ones every command takes after them)."""
    p = sub.add_parser(
        "verify",
        help="check every checksum and the structure; exit 1 if any file fails",
        description="Reads each file whole and checks the header, every array checksum and "
        "the structure. Prints one line per file: ok, or the problem. A checkpoint "
        "directory stands for all its checkpoints. Exit 0 when all are good, 1 "
        "otherwise.",
    )
    p.add_argument("files", metavar="FILE", nargs="+", help="files or checkpoint directories")
    p.set_defaults(func=cmd_verify)
    return p


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
        print_json({"ok": ok, "files": results})
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
