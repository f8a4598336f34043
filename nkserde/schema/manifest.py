"""The schema manifest: every registration's name, version and fields, and
the file format version, as data.

``tests/fixtures/schema_manifest.json`` holds the manifest of every schema
version nkserde ever wrote (a history: an entry is added for a new version,
never changed). ``tests/test_schema_manifest.py`` compares it with this
install's registrations and fails when fields change without a version bump
or a version is bumped without a migration. After a deliberate bump (with
its migration), record the new version with::

    python -m nkserde.schema --update tests/fixtures/schema_manifest.json

``nkserde/schema/versions.json`` (in the package) holds today's version and
the older names of every registration, so that the command line can tell
whether a file needs a migration without importing NetKet to register them;
``tests/test_schema_manifest.py`` checks it against the registrations, and
``python -m nkserde.schema --versions nkserde/schema/versions.json``
rewrites it.

The per-type tables of docs/schema.md are generated from the registrations'
``doc``: each row that names registered types is
``| `name` | version | doc |``, and ``python -m nkserde.schema --tables
docs/schema.md`` rewrites those rows (the test fails until it is run after
a registration's version or doc changed).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from ..format import FORMAT_VERSION

VERSIONS_FILE = Path(__file__).with_name("versions.json")


def current() -> dict:
    """``{"format_version": int, "types": {name: {"version": v, "fields":
    [...], "optional": [...]}}}`` of the registrations that declare their
    fields in this install (types of libraries that are not installed, or
    that this NetKet lacks, are absent)."""
    from .. import netket as _registrations  # noqa: F401  (NetKet's types)
    from ..types import builtin_types as _builtins, registry  # noqa: F401  (nkserde's own)

    types = {}
    for reg in registry.registrations().values():
        if reg.fields is None:
            continue
        types[reg.name] = {
            "version": reg.version,
            "fields": sorted(reg.fields),
            "optional": sorted(reg.optional_fields),
        }
    return {"format_version": FORMAT_VERSION, "types": dict(sorted(types.items()))}


def current_versions() -> dict:
    """``{"types": {name: version}, "aliases": {older name: name}}`` of this
    install's registrations."""
    from .. import netket as _registrations  # noqa: F401
    from ..types import builtin_types as _builtins, registry  # noqa: F401

    regs = registry.registrations().values()
    return {
        "types": dict(sorted((reg.name, reg.version) for reg in regs)),
        "aliases": dict(sorted((alias, reg.name) for reg in regs for alias in reg.aliases)),
    }


def recorded_versions() -> dict:
    """What :func:`current_versions` returned where ``versions.json``
    was written (nkserde's own registrations under the newest NetKet), read
    without importing NetKet."""
    return json.loads(VERSIONS_FILE.read_text())


def newer_versions(types: dict, known: dict | None = None) -> list[dict]:
    """The migrations a file's ``types`` ({name: schema version}, as
    ``nkserde.info`` gives them) need to reach today's versions:
    ``[{"type", "new_type", "from", "to"}]``, from ``known`` (default:
    :func:`recorded_versions`). A type nkserde does not know (a user's own
    registration) is taken as current."""
    known = recorded_versions() if known is None else known
    changes = []
    for name, version in sorted(types.items()):
        current = name if name in known["types"] else known["aliases"].get(name, name)
        to = known["types"].get(current, version)
        if current != name or to != version:
            changes.append({"type": name, "new_type": current, "from": version, "to": to})
    return changes


def differences(history: dict, now: dict | None = None) -> list[str]:
    """What ``now`` (default: :func:`current`) changed against the recorded
    ``history`` (``{"format_versions": [...], "types": {name: {version:
    entry}}}``) without the version bump and migration it needs. Empty when
    the two agree."""
    now = current() if now is None else now
    problems = []
    if now["format_version"] not in history["format_versions"]:
        problems.append(
            f"file format version {now['format_version']} is not recorded "
            f"(recorded: {history['format_versions']}); add it with --update"
        )
    from ..types import registry

    migrations = registry.migrations()
    for name, entry in now["types"].items():
        versions = history["types"].get(name, {})
        recorded = versions.get(str(entry["version"]))
        if recorded is None:
            problems.append(
                f"{name} version {entry['version']} is not recorded; add it with "
                f"--update (after adding migrations from the older versions)"
            )
        elif (recorded["fields"], recorded["optional"]) != (entry["fields"], entry["optional"]):
            added = sorted(set(entry["fields"]) - set(recorded["fields"]))
            removed = sorted(set(recorded["fields"]) - set(entry["fields"]))
            problems.append(
                f"{name} version {entry['version']}: fields changed without a version bump "
                f"(added {added}, removed {removed}, optional {recorded['optional']} -> "
                f"{entry['optional']}): bump the version and register a migration"
            )
        for older in sorted(int(v) for v in versions):
            if older < entry["version"] and (name, older) not in migrations:
                problems.append(f"{name}: no migration from recorded version {older} (current {entry['version']})")
    return problems


def updated(history: dict, now: dict | None = None) -> dict:
    """``history`` with the versions of ``now`` it lacks added. Raises
    ValueError rather than change a recorded version (that would be a
    silent schema change)."""
    now = current() if now is None else now
    out = {
        "format_versions": sorted(set(history.get("format_versions", [])) | {now["format_version"]}),
        "types": {name: dict(v) for name, v in history.get("types", {}).items()},
    }
    for name, entry in now["types"].items():
        versions = out["types"].setdefault(name, {})
        recorded = versions.get(str(entry["version"]))
        body = {"fields": entry["fields"], "optional": entry["optional"]}
        if recorded is not None and recorded != body:
            raise ValueError(
                f"{name} version {entry['version']} is recorded with other fields: "
                f"bump its version instead of changing a recorded one"
            )
        versions[str(entry["version"])] = body
    out["types"] = {k: dict(sorted(v.items(), key=lambda kv: int(kv[0]))) for k, v in sorted(out["types"].items())}
    return out


# a row of a per-type table: backticked names, a version, the fields
_ROW = re.compile(r"^\| (`[^|]*`) \| (\d+) \| (.*) \|$")


def with_generated_tables(text: str) -> tuple[str, list[str]]:
    """``text`` (docs/schema.md) with every table row that names registered
    types (several names: one registration's, e.g. a loop's) rewritten as
    ``| names | version | doc |`` from the registration, and the names of
    this install's registrations that no row names. A row naming only
    types that are not registered here (a rule's ``<module>.<Class>``, a
    NetKet this install lacks) is left as it is."""
    from .. import netket as _registrations  # noqa: F401
    from ..types import builtin_types as _builtins, registry  # noqa: F401

    regs = registry.registrations()
    named, lines = set(), []
    for line in text.split("\n"):
        match = _ROW.match(line)
        names = re.findall(r"`([^`]+)`", match.group(1)) if match else []
        found = [regs[n] for n in names if n in regs]
        if found:
            named.update(reg.name for reg in found)
            docs = {(reg.version, reg.doc) for reg in found}
            if len(docs) > 1:
                raise ValueError(f"docs/schema.md: one row names {names}, whose versions or docs differ")
            ((version, doc),) = docs
            line = f"| {match.group(1)} | {version} | {doc} |"
        lines.append(line)
    return "\n".join(lines), sorted(set(regs) - named)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--tables":
        import nkserde

        path = Path(argv[1])
        text, missing = with_generated_tables(path.read_text())
        path.write_text(text)
        if missing:
            print(f"nkserde.schema: no row of {path} names {', '.join(missing)}; add one", file=sys.stderr)
            return 1
        return 0
    if len(argv) == 2 and argv[0] == "--versions":
        Path(argv[1]).write_text(json.dumps(current_versions(), indent=1) + "\n")
        return 0
    if len(argv) == 2 and argv[0] == "--update":
        import netket  # noqa: F401  (the NetKet registrations)

        import nkserde

        try:
            with open(argv[1]) as f:
                history = json.load(f)
        except FileNotFoundError:
            history = {}
        try:
            new = updated(history)
        except ValueError as exc:
            print(f"nkserde.schema: {exc}", file=sys.stderr)
            return 1
        with open(argv[1], "w") as f:
            json.dump(new, f, indent=1)
            f.write("\n")
        return 0
    import nkserde  # noqa: F401

    json.dump(current(), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
