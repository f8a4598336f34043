"""The type registry: which types nkserde can store, under which name and
schema version, and the migrations registered for old schema versions
(migrations.py applies them).

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

A migration that needs more than the stored fields takes a second argument,
a :class:`nkserde.types.migrations.MigrationContext`: the template being loaded
into, and the objects enclosing it with the fields restored so far (a
sampler state's migration finds the variational state's model and restored
parameters)::

    @nkserde.migration("mylab.MyState", from_version=2)
    def _(fields, context):
        fields["norm"] = np.linalg.norm(context.template.weights)
        return fields

Besides exact types, *rules* register whole families of types on first sight
(NamedTuples, NetKet pytrees): a rule is a function ``type -> Registration |
None``.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Mapping

from ..errors import UnregisteredTypeError, format_path

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
      doc: the fields in words, as the type's row of docs/schema.md shows
        them (``python -m nkserde.schema --tables docs/schema.md`` writes
        the rows; a test holds them equal).
      free_fields: fields restored from the file alone, as plain dicts,
        lists, numpy arrays and scalars, whatever the template holds there:
        for data whose structure grows during a run (a logger's history),
        where the template is empty by nature.
      dtype_from_file: fields whose floating-point arrays keep the file's
        dtype where the template's differs only in precision: state whose
        dtype the run itself changes (flax creates BatchNorm statistics as
        float32, a NetKet step makes them float64), so a freshly built
        template cannot know it.
      fields: the field names of the current schema (what ``to_state``
        returns; checked on every save), recorded in the schema manifest
        that guards against unversioned changes; None for rule-made
        registrations, whose schema is their library's.
      optional_fields: fields that exist only under some versions of the
        library that defines the type (an attribute NetKet added): absent in
        the file, the template's value is kept; absent in the template (an
        older library), the file's value is not used.
      aliases: names older nkserde versions wrote for this type; a file
        naming one loads as this registration (they are compared, never
        imported).
      from_fields: ``fields -> object``, for a type that can be rebuilt from
        its stored fields alone where the template holds None (an object
        NetKet creates lazily at the first step).
      provisional: ``{field: next_step}`` for fields whose value in a freshly
        built object is provisional: the library builds it before the first
        step, and the first steps give it its structure (optax's ``monitor``
        fills an empty dict at its first update; a numpy sampler's first
        reset makes a complex ``log_prob`` real). ``next_step(template,
        value)`` returns the field's value after one more step of
        ``template`` from ``value`` (at first the template's own value),
        changing neither. A load calls it only where the file's value does
        not have the structure of the template's (docs/schema.md,
        "Provisional state").
    """

    name: str
    version: int
    to_state: ToState
    from_state: FromState
    _: dataclasses.KW_ONLY  # the rest by name: eleven in a row read as noise
    doc: str = ""
    free_fields: frozenset = frozenset()
    dtype_from_file: frozenset = frozenset()
    fields: tuple | None = None
    optional_fields: frozenset = frozenset()
    aliases: tuple = ()
    from_fields: Callable[[dict], Any] | None = None
    provisional: Mapping[str, Callable[[Any, Any], Any]] = dataclasses.field(default_factory=dict, hash=False)


@dataclasses.dataclass
class _Tables:
    """Everything the registry knows, in one object, so that a snapshot
    cannot miss a part (``rule_cache`` is derived: emptied on restore)."""

    by_type: dict[type, Registration] = dataclasses.field(default_factory=dict)
    by_name: dict[str, Registration] = dataclasses.field(default_factory=dict)
    subclass_types: list[type] = dataclasses.field(default_factory=list)  # subclasses=True, newest first
    rules: list[Callable[[type], Registration | None]] = dataclasses.field(default_factory=list)
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)  # an older name -> the registration's name
    migrations: dict[tuple[str, int], Callable[[dict, Any], dict]] = dataclasses.field(default_factory=dict)
    transfers: dict[str, tuple[str, frozenset]] = dataclasses.field(default_factory=dict)  # name -> (family, fields)
    rule_cache: dict[type, Any] = dataclasses.field(default_factory=dict)

    def copy(self) -> _Tables:
        parts = {f.name: type(v)(v) for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}
        return _Tables(**{**parts, "rule_cache": {}})


_TABLES = _Tables()
_NOT_REGISTERED = object()


def register(
    cls: type,
    *,
    name: str,
    version: int = 1,
    to_state: ToState,
    from_state: FromState,
    subclasses: bool = False,
    doc: str = "",
    free_fields=(),
    dtype_from_file=(),
    fields=None,
    optional_fields=(),
    aliases=(),
    from_fields=None,
    provisional=None,
    override: bool = False,
) -> Registration:
    """Registers ``cls`` (and, with ``subclasses=True``, its subclasses that
    have no registration of their own). A type that is already registered
    is refused (two libraries registering one type would silently decide
    each other's files) unless ``override=True``, which replaces it. See
    :class:`Registration` for the other arguments. Returns the
    Registration."""
    if not isinstance(name, str) or not name or name.startswith("@"):
        raise ValueError(f"invalid registration name {name!r}")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"schema version must be an int >= 1, got {version!r}")
    if cls in _TABLES.by_type and not override:
        raise ValueError(
            f"{module_path(cls)} is already registered as "
            f"{_TABLES.by_type[cls].name!r}; pass override=True to replace it"
        )
    other = _TABLES.by_name.get(name)
    owner = next((t for t, r in _TABLES.by_type.items() if r is other), None)
    if other is not None and owner is not None and owner is not cls:
        raise ValueError(f"name {name!r} is already registered for {owner.__qualname__}")
    provisional = dict(provisional or {})
    if fields is not None and not set(provisional) <= set(fields):
        raise ValueError(
            f"provisional fields {sorted(set(provisional) - set(fields))} are not among the fields of {name}"
        )
    reg = Registration(
        name,
        version,
        to_state,
        from_state,
        doc=doc,
        free_fields=frozenset(free_fields),
        dtype_from_file=frozenset(dtype_from_file),
        fields=None if fields is None else tuple(fields),
        optional_fields=frozenset(optional_fields),
        aliases=tuple(aliases),
        from_fields=from_fields,
        provisional=provisional,
    )
    _TABLES.by_type[cls] = reg
    _add_name(reg)
    if subclasses and cls not in _TABLES.subclass_types:
        _TABLES.subclass_types.insert(0, cls)
    _TABLES.rule_cache.clear()
    return reg


def add_rule(rule: Callable[[type], Registration | None]) -> None:
    """Adds a rule consulted for types without an exact registration."""
    _TABLES.rules.append(rule)
    _TABLES.rule_cache.clear()


def _add_name(reg: Registration) -> None:
    _TABLES.by_name[reg.name] = reg
    for alias in reg.aliases:
        _TABLES.aliases.setdefault(alias, reg.name)


def transferable(family: str, names, fields) -> None:
    """Declares the registrations ``names`` kinds of one ``family`` that
    share the fields ``fields`` (an MCState's and a FullSumState's
    parameters and model state; every driver's variational state). A
    non-strict load (``strict=False``) of one kind into a template of
    another takes those fields from the file and keeps the template's
    others, naming each in its report."""
    for name in names:
        _TABLES.transfers[name] = (family, frozenset(fields))


def transfer_fields(stored: str, wanted: str) -> frozenset | None:
    """The fields a load of a stored ``stored`` into a ``wanted`` takes,
    or None if the two are not kinds of one family."""
    a, b = _TABLES.transfers.get(stored), _TABLES.transfers.get(wanted)
    if a is None or b is None or a[0] != b[0]:
        return None
    return a[1] & b[1]


def migration(name: str, from_version: int, *, override: bool = False):
    """Decorator: ``fn(fields) -> fields`` or ``fn(fields, context) ->
    fields`` upgrades the stored fields of type ``name`` from
    ``from_version`` to ``from_version + 1``; ``context`` is a
    :class:`nkserde.types.migrations.MigrationContext`. ``fn`` may change ``fields`` in place. A
    second migration for the same step is refused unless ``override=True``."""

    def decorate(fn):
        if (name, from_version) in _TABLES.migrations and not override:
            raise ValueError(
                f"a migration of {name} from version {from_version} is already "
                f"registered; pass override=True to replace it"
            )
        takes_context = len(inspect.signature(fn).parameters) >= 2
        _TABLES.migrations[(name, from_version)] = fn if takes_context else (lambda f, _c: fn(f))
        return fn

    return decorate


def migration_step(name: str, from_version: int) -> Callable[[dict, Any], dict] | None:
    """The migration of ``name`` from ``from_version``, as ``fn(fields,
    context)``, or None."""
    return _TABLES.migrations.get((name, from_version))


def migrations() -> dict[tuple[str, int], Callable]:
    """Every registered migration, by (name, from_version)."""
    return dict(_TABLES.migrations)


def module_path(cls: type) -> str:
    """``module.QualName`` of a class: how messages name a type, and the
    name a rule gives a type without a registration of its own (nkserde
    0.1 wrote it too). Compared, never imported."""
    return f"{cls.__module__}.{cls.__qualname__}"


def unregistered(obj, path) -> UnregisteredTypeError:
    """The error of a value, met at ``path`` of an object being saved or of
    a template, whose type has no registration."""
    return UnregisteredTypeError(
        f"{format_path(path)}: no nkserde registration for type "
        f"{module_path(type(obj))}; register it with nkserde.register(...)"
    )


def lookup(cls: type) -> Registration | None:
    """The registration for instances of ``cls``, or None."""
    reg = _TABLES.by_type.get(cls)
    if reg is not None:
        return reg
    cached = _TABLES.rule_cache.get(cls, None)
    if cached is not None:
        return None if cached is _NOT_REGISTERED else cached
    for base in _TABLES.subclass_types:
        if issubclass(cls, base):
            reg = _TABLES.by_type[base]
            break
    else:
        for rule in _TABLES.rules:
            reg = rule(cls)
            if reg is not None:
                if reg.name not in _TABLES.by_name:
                    _add_name(reg)
                break
    _TABLES.rule_cache[cls] = _NOT_REGISTERED if reg is None else reg
    return reg


def lookup_name(name: str) -> Registration | None:
    return _TABLES.by_name.get(resolve(name))


def resolve(name: str) -> str:
    """The current name of a name found in a file (an alias, or itself)."""
    return name if name in _TABLES.by_name else _TABLES.aliases.get(name, name)


def known_name(name: str) -> bool:
    return resolve(name) in _TABLES.by_name


def snapshot() -> _Tables:
    """The registry's current content, for :func:`restore` (tests that
    register types put the registry back as it was)."""
    return _TABLES.copy()


def restore(saved: _Tables) -> None:
    """Puts back what :func:`snapshot` returned."""
    vars(_TABLES).update(vars(saved.copy()))


def is_registered(obj) -> bool:
    """Whether ``obj``'s type has a registration (its own or a rule's):
    whether a save stores it as an object of its type."""
    return lookup(type(obj)) is not None


def stored_fields(type_name: str) -> tuple[str, ...]:
    """The fields the registration of a stored type name declares (old
    names resolved), or () if it declares none or the name is unknown."""
    reg = lookup_name(type_name)
    return tuple(reg.fields or ()) if reg is not None else ()


def registrations() -> dict[str, Registration]:
    """Every named registration known so far (rules add theirs lazily)."""
    return dict(_TABLES.by_name)


class FieldNotStored(UnregisteredTypeError):
    """Raised by a ``to_state`` for a field it cannot store and must not drop
    (the walker adds the path); ``field``: its name."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
