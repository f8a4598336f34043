"""Helpers shared by the NetKet registrations."""

from __future__ import annotations

import copy

from .. import registry


def register_attributes(cls, name: str, fields: dict[str, str], *, version: int = 1,
                        doc: str = "", subclasses: bool = False, immutable: bool = False,
                        adjust=None, dtype_from_file=()):
    """Registers ``cls`` as a record of attributes: ``fields`` maps the
    nkserde field name to the attribute that holds it.

    Loading builds the new object from the template: ``template.replace(...)``
    for immutable pytrees, else a shallow copy with the restored attributes
    set on it. Everything not stored (operators, models, closures,
    hyperparameters) is the template's. ``adjust(field dict) -> field dict``,
    if given, edits what is stored (e.g. marks fields for multi-process
    layouts)."""

    def to_state(obj):
        state = {key: getattr(obj, attr) for key, attr in fields.items()}
        return adjust(state) if adjust is not None else state

    def from_state(template, restored):
        values = {attr: restored[key] for key, attr in fields.items()}
        if immutable:
            return template.replace(**values)
        new = copy.copy(template)
        for attr, value in values.items():
            object.__setattr__(new, attr, value)
        return new

    return registry.register(cls, name=name, version=version, to_state=to_state,
                             from_state=from_state, doc=doc, subclasses=subclasses,
                             dtype_from_file=dtype_from_file)


def pytree_fields(cls) -> tuple[str, ...]:
    """The fields of a NetKet ``struct.Pytree`` class that NetKet marks
    serializable."""
    skip = set(cls._pytree__noserialize_fields) | {"_pytree__node_fields"}
    return tuple(f for f in cls._pytree__fields if f not in skip)
