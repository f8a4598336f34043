"""``nkserde migrate IN [OUT]``: a file rewritten at today's format and
schema versions (nkserde.migrate), or with ``--dry-run`` what would change.
An up-to-date ``--dry-run`` reads the header alone; a migration imports
NetKet when it runs."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from ..loading import file_info
from ..schema import manifest
from .. import format as fileformat
from ..format.atomic import fsync_directory
from .command_error import CommandError, existing_file
from .output import Output, print_json


def add_parser(sub) -> argparse.ArgumentParser:
    """``nkserde migrate`` and its own arguments (nkserde.cli.commands adds
    the ones every command takes after them)."""
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
    p.set_defaults(func=cmd_migrate)
    return p


def _planned_changes(path: Path) -> tuple[dict, list[dict]]:
    info = file_info.info(path)
    return info, manifest.newer_versions(info.get("types") or {})


def _make_durable(path: Path) -> None:
    """fsyncs ``path`` and its directory entry."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    fsync_directory(path.parent)


def _backup_path(path: Path) -> Path:
    candidate = path.with_name(path.name + ".bak")
    i = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.bak{i}")
        i += 1
    return candidate


def cmd_migrate(args) -> int:
    src = existing_file(args.input)
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
            from .. import netket as _registrations  # noqa: F401  (NetKet's types, as the migration has them)
            from ..loading.load import load

            load(template, src)  # raises now what the migration would raise
        elif not result["up_to_date"]:
            from ..schema.migrate import current_state_dict

            current_state_dict(src)  # raises now what the migration would raise
    else:
        from ..schema.migrate import migrate as migrate_file

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
        print_json(result)
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
