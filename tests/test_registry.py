"""User registrations, schema versions and migrations."""

from __future__ import annotations

import dataclasses
import sys
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

import nkserde
from nkserde.types import registry
from nkserde.errors import TemplateMismatchError, UnregisteredTypeError, UnsupportedVersionError


@dataclasses.dataclass
class Walker:
    position: np.ndarray
    energy: float
    label: str = "walker"


def _register_walker(version=1, override=False):
    nkserde.register(
        Walker,
        name="tests.Walker",
        version=version,
        override=override,
        to_state=lambda w: {"position": w.position, "energy": w.energy},
        from_state=lambda t, f: dataclasses.replace(t, position=f["position"], energy=f["energy"]),
    )


@pytest.fixture(autouse=True)
def _restore_registry():
    saved = registry.snapshot()
    yield
    registry.restore(saved)


def test_user_type_round_trip_inside_containers(tmp_path):
    _register_walker()
    obj = {"walkers": [Walker(np.arange(3.0), -1.5), Walker(np.ones(3), 2.0)], "n": 2}
    nkserde.save(obj, tmp_path / "w.nks")
    template = {"walkers": [Walker(np.zeros(3), 0.0, "a"), Walker(np.zeros(3), 0.0, "b")], "n": 0}
    out = nkserde.load(template, tmp_path / "w.nks")
    assert out["walkers"][0].position.tolist() == [0.0, 1.0, 2.0]
    assert out["walkers"][1].energy == 2.0
    assert out["walkers"][0].label == "a"  # not stored: from the template
    assert template["walkers"][0].position.tolist() == [0.0, 0.0, 0.0]  # template untouched
    assert nkserde.info(tmp_path / "w.nks")["types"] == {"tests.Walker": 1}
    sd = nkserde.state_dict(obj)
    assert sd["walkers"][0] == {
        "@type": "tests.Walker",
        "@version": 1,
        "position": sd["walkers"][0]["position"],
        "energy": -1.5,
    }
    again = nkserde.from_state_dict(template, sd)
    assert again["walkers"][1].position.tolist() == [1.0, 1.0, 1.0]


def test_migration_upgrades_old_files(tmp_path):
    # version 1 stored "energy"; version 2 stores "energy" and "weight"
    _register_walker(version=1)
    nkserde.save(Walker(np.ones(2), 3.0), tmp_path / "old.nks")

    nkserde.register(
        Walker,
        name="tests.Walker",
        version=2,
        override=True,
        to_state=lambda w: {"position": w.position, "energy": w.energy, "weight": 1.0},
        from_state=lambda t, f: dataclasses.replace(t, position=f["position"], energy=f["energy"] * f["weight"]),
    )
    with pytest.raises(UnsupportedVersionError, match="version 1 in the file, current is 2"):
        nkserde.load(Walker(np.zeros(2), 0.0), tmp_path / "old.nks")

    @nkserde.migration("tests.Walker", from_version=1)
    def _add_weight(fields):
        fields["weight"] = 0.5
        return fields

    out = nkserde.load(Walker(np.zeros(2), 0.0), tmp_path / "old.nks")
    assert out.energy == 1.5


def test_newer_schema_version_is_refused(tmp_path):
    _register_walker(version=3)
    nkserde.save(Walker(np.ones(2), 3.0), tmp_path / "new.nks")
    _register_walker(version=2, override=True)  # an older nkserde / library reads it
    with pytest.raises(UnsupportedVersionError, match=r"tests.Walker has schema version 3 .* version 2"):
        nkserde.load(Walker(np.zeros(2), 0.0), tmp_path / "new.nks")


def test_re_registering_a_type_is_refused_unless_overridden():
    _register_walker()
    with pytest.raises(ValueError, match=r"Walker is already registered as 'tests.Walker'.*override=True"):
        _register_walker(version=2)
    assert registry.lookup(Walker).version == 1  # unchanged
    _register_walker(version=2, override=True)
    assert registry.lookup(Walker).version == 2

    @nkserde.migration("tests.Walker", from_version=1)
    def _(fields):
        return fields

    with pytest.raises(ValueError, match="migration of tests.Walker from version 1 is already"):
        nkserde.migration("tests.Walker", from_version=1)(lambda fields: fields)


def test_snapshot_and_restore_put_the_registry_back():
    saved = registry.snapshot()
    _register_walker()
    assert registry.lookup(Walker) is not None and registry.known_name("tests.Walker")
    registry.restore(saved)
    assert registry.lookup(Walker) is None and not registry.known_name("tests.Walker")


def test_file_type_differs_from_template_type(tmp_path):
    _register_walker()

    class Other(NamedTuple):
        position: np.ndarray

    nkserde.save({"x": Other(np.ones(2))}, tmp_path / "o.nks")
    with pytest.raises(TemplateMismatchError, match=r"x: file has .*Other, template has tests.Walker"):
        nkserde.load({"x": Walker(np.zeros(2), 0.0)}, tmp_path / "o.nks")


def test_loading_never_imports_or_runs_names_from_the_file(tmp_path):
    """A file naming a module/function as its type is refused without
    importing it."""

    class Box(NamedTuple):
        v: np.ndarray

    path = tmp_path / "evil.nks"
    nkserde.save({"x": Box(np.ones(1))}, path)
    _, sd = nkserde.format.read_file(path)
    sd["x"]["@type"] = "antigravity.fly"
    nkserde.format.write_file(path, sd, {})
    assert "antigravity" not in sys.modules
    with pytest.raises(UnregisteredTypeError, match="antigravity.fly"):
        nkserde.load({"x": Box(np.zeros(1))}, path)
    assert "antigravity" not in sys.modules


def test_invalid_registrations():
    with pytest.raises(ValueError, match="invalid registration name '@bad'"):
        nkserde.register(Walker, name="@bad", to_state=dict, from_state=lambda t, f: t)
    with pytest.raises(ValueError, match="schema version must be an int >= 1, got 0"):
        nkserde.register(Walker, name="ok", version=0, to_state=dict, from_state=lambda t, f: t)


def test_reserved_keys_and_bad_keys_are_refused(tmp_path):
    with pytest.raises(UnregisteredTypeError, match="reserved"):
        nkserde.save({"@type": 1}, tmp_path / "k.nks")
    with pytest.raises(UnregisteredTypeError, match="keys must be str or int"):
        nkserde.save({(1, 2): 1}, tmp_path / "k.nks")


def test_weak_type_is_restored(tmp_path):
    x = {"w": jnp.asarray(0.5), "s": jnp.asarray(0.5, dtype=jnp.float64)}
    assert x["w"].weak_type and not x["s"].weak_type
    nkserde.save(x, tmp_path / "w.nks")
    out = nkserde.load(x, tmp_path / "w.nks")
    assert out["w"].weak_type and not out["s"].weak_type
    assert (out["w"] * jnp.ones(2, jnp.float32)).dtype == jnp.float32


def test_schema_doc_lists_every_registered_netket_type():
    """docs/schema.md is the contract: every explicit registration is in it."""
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "schema.md").read_text()
    names = {r.name for r in registry.snapshot().by_type.values()}
    missing = sorted(n for n in names if f"`{n}`" not in doc and not n.startswith("tests."))
    assert not missing, f"undocumented registrations: {missing}"


def test_a_snapshot_restores_every_table_of_the_registry():
    """Registrations, rules, aliases, migrations and transfer families are
    all put back (one object holds them all)."""
    saved = registry.snapshot()
    _register_walker()
    registry.add_rule(lambda cls: None)
    registry.transferable("walkers", ["tests.Walker"], ["position"])

    @registry.migration("tests.Walker", 1)
    def _upgrade(fields):
        return fields

    assert registry.lookup(Walker) is not None and registry.transfer_fields("tests.Walker", "tests.Walker")
    registry.restore(saved)
    assert registry.lookup(Walker) is None
    assert registry.transfer_fields("tests.Walker", "tests.Walker") is None
    assert ("tests.Walker", 1) not in registry.migrations()
    assert registry.snapshot().rules == saved.rules
