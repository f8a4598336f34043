"""The type registry: which types nkserde can store, under which name and
schema version, and how old schema versions are upgraded.

One extension point, :func:`register`::

    nkserde.register(MyState, name="mylab.MyState", version=1,
                     to_state=lambda s: {"weights": s.w, "step": s.step},
                     from_state=lambda template, f: MyState(f["weights"], f["step"]))

``to_state(obj)`` returns a dict of the object's *fields* (any storable
values: arrays, scalars, containers, other registered objects). nkserde
recurses into them itself. ``from_state(template, fields)`` receives the same
keys, each already restored against the template's own field, and returns a
new object; it must not mutate ``template``.

Migrations upgrade a stored field dict one version at a time::

    @nkserde.migration("mylab.MyState", from_version=1)
    def _(fields):
        fields["step"] = fields.pop("n_steps")
        return fields

Besides exact types, *rules* register whole families of types on first sight
(NamedTuples, typed JAX PRNG keys, NetKet pytrees): a rule is a function
``type -> Registration | None``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from .errors import UnregisteredTypeError, UnsupportedVersionError, format_path

ToState = Callable[[Any], Mapping[str, Any]]
FromState = Callable[[Any, dict], Any]


@dataclasses.dataclass(frozen=True)
class Registration:
    """How one type is stored.

    Attributes:
      name: stable name written to files (never a Python import path that is
        resolved on load).
      version: current schema version (int >= 1) of the field dict.
      to_state: object -> dict of fields.
      from_state: (template, restored fields) -> new object.
      doc: one line per field, for the schema documentation.
      free_fields: fields restored from the file alone, as plain dicts,
        lists, numpy arrays and scalars, whatever the template holds there:
        for data whose structure grows during a run (a logger's history),
        where the template is empty by nature.
      dtype_from_file: fields whose floating-point arrays keep the file's
        dtype where the template's differs only in precision: state whose
        dtype the run itself changes (flax creates BatchNorm statistics as
        float32, a NetKet step makes them float64), so a freshly built
        template cannot know it.
    """

    name: str
    version: int
    to_state: ToState
    from_state: FromState
    doc: str = ""
    free_fields: frozenset = frozenset()
    dtype_from_file: frozenset = frozenset()


_BY_TYPE: dict[type, Registration] = {}
_BY_NAME: dict[str, Registration] = {}
_SUBCLASS_TYPES: list[type] = []  # registered with subclasses=True, newest first
_RULES: list[Callable[[type], Registration | None]] = []
_MIGRATIONS: dict[tuple[str, int], Callable[[dict], dict]] = {}
_NOT_REGISTERED = object()
_RULE_CACHE: dict[type, Any] = {}


def register(cls: type, *, name: str, version: int = 1, to_state: ToState,
             from_state: FromState, subclasses: bool = False, doc: str = "",
             free_fields=(), dtype_from_file=()) -> Registration:
    """Registers ``cls`` (and, with ``subclasses=True``, its subclasses that
    have no registration of their own). Re-registering a type replaces it.
    Returns the Registration."""
    if not isinstance(name, str) or not name or name.startswith("@"):
        raise ValueError(f"invalid registration name {name!r}")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"schema version must be an int >= 1, got {version!r}")
    other = _BY_NAME.get(name)
    owner = next((t for t, r in _BY_TYPE.items() if r is other), None)
    if other is not None and owner is not None and owner is not cls:
        raise ValueError(f"name {name!r} is already registered for {owner.__qualname__}")
    reg = Registration(name, version, to_state, from_state, doc, frozenset(free_fields),
                       frozenset(dtype_from_file))
    _BY_TYPE[cls] = reg
    _BY_NAME[name] = reg
    if subclasses and cls not in _SUBCLASS_TYPES:
        _SUBCLASS_TYPES.insert(0, cls)
    _RULE_CACHE.clear()
    return reg


def add_rule(rule: Callable[[type], Registration | None]) -> None:
    """Adds a rule consulted for types without an exact registration."""
    _RULES.append(rule)
    _RULE_CACHE.clear()


def migration(name: str, from_version: int):
    """Decorator: ``fn(fields) -> fields`` upgrades the stored fields of type
    ``name`` from ``from_version`` to ``from_version + 1``."""

    def decorate(fn):
        _MIGRATIONS[(name, from_version)] = fn
        return fn

    return decorate


def lookup(cls: type) -> Registration | None:
    """The registration for instances of ``cls``, or None."""
    reg = _BY_TYPE.get(cls)
    if reg is not None:
        return reg
    cached = _RULE_CACHE.get(cls, None)
    if cached is not None:
        return None if cached is _NOT_REGISTERED else cached
    for base in _SUBCLASS_TYPES:
        if issubclass(cls, base):
            reg = _BY_TYPE[base]
            break
    else:
        for rule in _RULES:
            reg = rule(cls)
            if reg is not None:
                _BY_NAME.setdefault(reg.name, reg)
                break
    _RULE_CACHE[cls] = _NOT_REGISTERED if reg is None else reg
    return reg


def lookup_name(name: str) -> Registration | None:
    return _BY_NAME.get(name)


def known_name(name: str) -> bool:
    return name in _BY_NAME


def registrations() -> dict[str, Registration]:
    """Every named registration known so far (rules add theirs lazily)."""
    return dict(_BY_NAME)


def upgrade(name: str, version: int, fields: dict, current: int, path=(), file=None) -> dict:
    """Applies the migrations of ``name`` from ``version`` to ``current``."""
    where = f"{file}: " if file else ""
    if version > current:
        raise UnsupportedVersionError(
            f"{where}{format_path(path)}: {name} has schema version {version} in the file, "
            f"newer than version {current} known to this nkserde; upgrade nkserde")
    while version < current:
        step = _MIGRATIONS.get((name, version))
        if step is None:
            raise UnsupportedVersionError(
                f"{where}{format_path(path)}: {name} schema version {version} in the file, "
                f"current is {current}, and no migration from version {version} is registered")
        fields = step(dict(fields))
        version += 1
    return fields


def unregistered(obj, path) -> UnregisteredTypeError:
    cls = type(obj)
    return UnregisteredTypeError(
        f"{format_path(path)}: no nkserde registration for type "
        f"{cls.__module__}.{cls.__qualname__}; register it with nkserde.register(...)")
