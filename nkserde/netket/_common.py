"""Helpers shared by the NetKet registrations."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import random

import jax
import numpy as np

from netket.utils.struct import Pytree

from ..types import registry


def find(*dotted: str):
    """The first of the named objects that exists in the installed
    libraries (``"netket.logging.WandbLog"``), or None: registrations
    detect what a NetKet release has, not its version number. The names
    are nkserde's own, never read from a file."""
    for name in dotted:
        module, _, attr = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attr, None)
        except ImportError:
            found = None
        if found is not None:
            return found
    return None


def register_attributes(
    cls,
    name: str,
    fields: dict[str, str],
    *,
    version: int = 1,
    doc: str = "",
    subclasses: bool = False,
    immutable: bool = False,
    adjust=None,
    dtype_from_file=(),
    optional=(),
    aliases=(),
    finish=None,
    provisional=None,
):
    """Registers ``cls`` as a record of attributes: ``fields`` maps the
    nkserde field name to the attribute that holds it. ``optional`` fields
    are attributes only some library versions have (see
    ``Registration.optional_fields``); an object without the attribute
    does not store the field. ``finish(template, new) -> new``, if given,
    completes the loaded object. ``provisional``: see
    ``Registration.provisional``.

    Loading builds the new object from the template: ``template.replace(...)``
    for immutable pytrees, else a shallow copy with the restored attributes
    set on it. Everything not stored (operators, models, closures,
    hyperparameters) is the template's. ``adjust(field dict) -> field dict``,
    if given, edits what is stored (e.g. marks fields for multi-process
    layouts)."""

    def to_state(obj):
        state = {key: getattr(obj, attr) for key, attr in fields.items() if key not in optional or hasattr(obj, attr)}
        return adjust(state) if adjust is not None else state

    def from_state(template, restored):
        values = {attr: restored[key] for key, attr in fields.items() if key in restored}
        if immutable:
            new = template.replace(**values)
        else:
            new = copy.copy(template)
            for attr, value in values.items():
                object.__setattr__(new, attr, value)
        return new if finish is None else finish(template, new)

    return registry.register(
        cls,
        name=name,
        version=version,
        to_state=to_state,
        from_state=from_state,
        doc=doc,
        subclasses=subclasses,
        dtype_from_file=dtype_from_file,
        fields=tuple(fields),
        optional_fields=optional,
        aliases=aliases,
        provisional=provisional,
    )


def attributes(fields):
    """``to_state`` of a record stored as its attributes ``fields``."""
    return lambda obj: {f: getattr(obj, f) for f in fields}


def replace_record(template, restored: dict):
    """``from_state`` of a record: a NetKet Pytree's ``replace``, else
    ``dataclasses.replace``, with the restored attributes."""
    if isinstance(template, Pytree):
        return template.replace(**restored)
    return dataclasses.replace(template, **restored)


# Run state is what a later step depends on and the run changes: a random
# generator or key. A field the fallback does not store (NetKet marks it
# not serializable, or not a pytree node) holding one would make a resumed
# run draw other numbers, silently; such a field needs a registration.
# Everything else NetKet leaves out (arrays included) is configuration or a
# cache a step recomputes (SR's last matrix, a solver's info); see
# docs/schema.md, "The fallback".
_KEY_NAMES = ("rng", "key", "seed")


def _run_state(name: str, value) -> str | None:
    """What kind of run state ``value`` (of field ``name``) is, or None."""
    if isinstance(value, (np.random.Generator, np.random.RandomState, np.random.BitGenerator, random.Random)):
        return f"a {type(value).__name__} (random numbers the run draws)"
    dtype = getattr(value, "dtype", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return "a JAX random key"
    if (
        isinstance(value, (np.ndarray, jax.Array))
        and np.dtype(dtype) == np.uint32
        and any(word in name.lower() for word in _KEY_NAMES)
    ):
        return "a JAX random key (a uint32 array)"
    return None


def refusing_to_drop_run_state(cls, stored: tuple, dropped: tuple):
    """``to_state`` of a rule-made registration storing the attributes
    ``stored``: raises FieldNotStored if one of ``dropped`` holds run state."""

    def to_state(obj):
        for name in dropped:
            kind = _run_state(name, getattr(obj, name, None))
            if kind is not None:
                raise registry.FieldNotStored(
                    name,
                    f"{registry.module_path(cls)}.{name} holds {kind}, which NetKet does not serialize "
                    "and nkserde has no registration for: a resumed run would not continue exactly. Register "
                    "the class (nkserde.register, docs/schema.md) to store it",
                )
        return {f: getattr(obj, f) for f in stored}

    return to_state
