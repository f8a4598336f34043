"""What a strict load that did not fit its template can do instead: the
hint that ends its TemplateMismatchError (load the part of the file that
has the template's type with ``at=``, a template of the file's type, or
what matches with ``strict=False``). Read from the registry and the
file's header tree alone: nothing is read or loaded; ``load.load`` calls
:func:`what_to_do` once, on its error path."""

from __future__ import annotations

import functools

from . import partial_load
from ..types import registry
from ..format.tree_codec import TYPE


def what_to_do(template, state, where, path) -> str:
    """What a strict load that did not fit its template can do instead, to
    end its message: load the part of the file that has the template's type
    (``at=``), a template of the file's type, or what matches
    (``strict=False``)."""
    reg = registry.lookup(type(template))
    stored = state.get(TYPE) if isinstance(state, dict) else None
    if isinstance(stored, str) and (reg is None or registry.resolve(stored) != reg.name):
        stored = registry.resolve(stored)
        if reg is not None and registry.transfer_fields(stored, reg.name) is not None:
            return ""  # the message names strict=False already (MCState <-> FullSumState)
        wanted = reg.name if reg is not None else f"{type(template).__name__} like the template"
        for transfer in (False, True):
            places = _places_like(template, reg, state, transfer=transfer)
            if places:
                ats = [partial_load.format_path(where + p) for p in places]
                holds = f"a {wanted}"
                if transfer:  # e.g. an MCState where the template is a FullSumState
                    node = functools.reduce(lambda n, k: n[k], places[0], state)
                    kind = registry.resolve(node[TYPE])
                    holds = f"a {kind} (strict=False loads its shared fields into a {wanted})"
                return (
                    f"; the file holds {holds} at " + " and ".join(f'"{at}"' for at in ats) + ": load that part "
                    f'with nkserde.load(template, "{path}", at="{ats[0]}"' + (", strict=False)" if transfer else ")")
                )
        held = _field_holding(template, reg, stored)
        if held is not None:
            return (
                f"; the template's {reg.name} holds a {stored} at {held}: load the file into a {stored} "
                f"template (the one you build the {reg.name} with)"
            )
        return f"; load it into a template of type {stored}, built as the saved object was"
    return (
        "; build the template as the saved object was built (the same model, sampler and sizes), or "
        "load what matches with strict=False (each entry that differs keeps the template's value and is named "
        "in the LoadReport)"
    )


def _places_like(template, reg, state, *, transfer: bool = False, limit: int = 3) -> list[tuple]:
    """Paths inside ``state`` (the header's tree: nothing is read) of a
    stored object of ``reg``'s type (``transfer``: of a type that
    ``strict=False`` transfers into it), or without a registration, of a
    plain map with the keys of the template's mapping: where ``at=`` would
    load."""
    keys = {str(k) for k in template} if reg is None and isinstance(template, dict) and not transfer else None
    if reg is None and not keys:
        return []

    def fits(node: dict) -> bool:
        stored = node.get(TYPE)
        if reg is None:  # a plain map with the template's keys
            return not isinstance(stored, str) and set(map(str, node)) == keys
        if not isinstance(stored, str):
            return False
        if transfer:
            return registry.transfer_fields(registry.resolve(stored), reg.name) is not None
        return registry.resolve(stored) == reg.name

    found, frontier = [], [((), state)]
    for _ in range(8):  # breadth first, a few levels: the nearest places
        deeper = []
        for where, node in frontier:
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for k, child in items:
                if isinstance(child, dict) and fits(child):
                    found.append(where + (k,))
                    if len(found) == limit:
                        return found
                    continue
                if isinstance(child, (dict, list)):
                    deeper.append((where + (k,), child))
        frontier = deeper
    return found


def _field_holding(template, reg, stored: str) -> str | None:
    """The field of the template's object that holds an object of the
    stored type (a driver's ``state``), quoted, or None."""
    if reg is None:
        return None
    try:
        fields = reg.to_state(template)
    except Exception:  # noqa: BLE001  (a registration's own code on this template, whatever it raises: no hint)
        return None
    for name, value in fields.items():
        inner = registry.lookup(type(value))
        if inner is not None and inner.name == stored:
            return f'"{name}"'
    return None
