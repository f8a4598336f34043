"""The schema drift guard: the committed manifest (tests/fixtures/
schema_manifest.json, every schema version nkserde ever wrote) against this
install's registrations."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nkserde
from nkserde.types import registry
from nkserde.schema import manifest as schema
from nkserde.netket._common import find
from nkserde.errors import UnregisteredTypeError

MANIFEST = Path(__file__).parent / "fixtures" / "schema_manifest.json"


def history():
    return json.loads(MANIFEST.read_text())


def current():
    """This install's manifest without the types tests register."""
    now = schema.current()
    now["types"] = {k: v for k, v in now["types"].items() if not k.startswith("tests.")}
    return now


def test_registrations_match_the_manifest():
    problems = schema.differences(history(), current())
    assert not problems, "\n".join(problems)


def test_the_manifest_covers_the_netket_registrations():
    names = set(current()["types"])
    for name in (
        "netket.vqs.MCState",
        "netket.driver.VMC",
        "netket.sampler.MetropolisSamplerState",
        "netket.stats.OnlineStats",
        "netket.callbacks.EarlyStopping",
        "jax.random.key",
    ):
        if (
            name == "netket.stats.OnlineStats"
            and find("netket.stats.OnlineStats", "netket._src.stats.online_stats.accumulator.OnlineStats") is None
        ):
            continue  # NetKet 3.21 has no online statistics
        assert name in names


def test_a_new_field_without_a_version_bump_is_caught():
    now = copy.deepcopy(current())
    now["types"]["netket.vqs.MCState"]["fields"].append("new_field")
    problems = schema.differences(history(), now)
    assert len(problems) == 1 and "netket.vqs.MCState" in problems[0] and "new_field" in problems[0]


def test_a_removed_field_or_optional_change_is_caught():
    now = copy.deepcopy(current())
    now["types"]["netket.driver.VMC"]["fields"].remove("momentum")
    now["types"]["netket.vqs.FullSumState"]["optional"].append("chunk_size")
    problems = schema.differences(history(), now)
    assert any("netket.driver.VMC " in p and "removed ['momentum']" in p for p in problems)
    assert any("netket.vqs.FullSumState" in p for p in problems)


def test_a_version_bump_needs_a_recorded_entry_and_a_migration():
    now = copy.deepcopy(current())
    now["types"]["netket.vqs.FullSumState"]["version"] = 2
    problems = schema.differences(history(), now)
    assert any("FullSumState version 2 is not recorded" in p for p in problems)
    assert any("FullSumState: no migration from recorded version 1" in p for p in problems)
    # recorded (as --update would), the missing migration is still reported
    problems = schema.differences(schema.updated(history(), now), now)
    assert problems == ["netket.vqs.FullSumState: no migration from recorded version 1 (current 2)"]


def test_a_changed_format_version_is_caught():
    now = dict(current(), format_version=3)
    assert any("file format version 3" in p for p in schema.differences(history(), now))


def test_update_never_rewrites_a_recorded_version():
    now = copy.deepcopy(current())
    now["types"]["netket.vqs.MCState"]["fields"].append("new_field")
    version = now["types"]["netket.vqs.MCState"]["version"]
    with pytest.raises(ValueError, match=f"netket.vqs.MCState version {version} is recorded"):
        schema.updated(history(), now)


class _Drifting:
    def __init__(self, extra):
        self.extra = extra


def test_a_registration_returning_undeclared_fields_cannot_save(tmp_path):
    registry.register(
        _Drifting,
        name="tests.Drifting",
        version=1,
        fields=("a",),
        to_state=lambda o: {"a": np.zeros(2), **({"b": 1} if o.extra else {})},
        from_state=lambda t, f: t,
    )
    nkserde.save(_Drifting(False), tmp_path / "ok.nks")
    with pytest.raises(UnregisteredTypeError, match=r"tests.Drifting .*returned fields \['a', 'b'\]"):
        nkserde.save({"x": _Drifting(True)}, tmp_path / "bad.nks")


def test_the_versions_file_the_command_line_reads_agrees_with_the_registrations():
    """``nkserde/schema/versions.json`` (what ``nkserde migrate --dry-run``
    plans from without NetKet) is what a fresh process of this install
    registers: every type at its version, and its older names (a type of a
    newer NetKet may be there too). Types a rule registers on first sight
    are not in it; rules make version 1 registrations, which it takes as
    current. Rewrite it with ``python -m nkserde.schema --versions
    nkserde/schema/versions.json``."""
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from nkserde.schema import manifest; print(json.dumps(manifest.current_versions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    now, recorded = json.loads(fresh.stdout), schema.recorded_versions()
    stale = {k: (recorded["types"].get(k), v) for k, v in now["types"].items() if recorded["types"].get(k) != v}
    assert not stale, f"(recorded, registered) versions differ: {stale}"
    assert {k: recorded["aliases"].get(k) for k in now["aliases"]} == now["aliases"]


def test_the_schema_pages_tables_are_generated_from_the_registrations():
    # every row of docs/schema.md that names a registered type says its
    # version and its registration's doc, and every type nkserde registers
    # has a row: a bump or a changed doc without `--tables` fails here
    page = Path(__file__).parent.parent / "docs" / "schema.md"
    text = page.read_text()
    generated, missing = schema.with_generated_tables(text)
    changed = [new for old, new in zip(text.split("\n"), generated.split("\n")) if old != new]
    assert not changed, f"run python -m nkserde.schema --tables docs/schema.md; rows out of date: {changed}"
    ours = set(schema.recorded_versions()["types"])
    assert not set(missing) & ours, f"registrations without a row in docs/schema.md: {sorted(set(missing) & ours)}"


def test_a_changed_doc_or_version_is_a_changed_row():
    reg = registry.lookup_name("netket.sampler.ExactSamplerState")
    row = f"| `{reg.name}` | {reg.version} | {reg.doc} |"
    stale = f"| `{reg.name}` | {reg.version + 1} | older words |"
    assert schema.with_generated_tables(stale)[0] == row
