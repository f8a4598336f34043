"""Callbacks of ``netket.callbacks`` (EarlyStopping, ConvergenceStopping,
...) and users' own: what a checkpoint keeps of them.

A callback's fields that NetKet marks serializable are stored. On load only
its *state* is taken from the file: the fields whose names start with ``_``
(``EarlyStopping._best_val``, ``ConvergenceStopping._loss_window``, ...).
Its public fields are its configuration (``patience``, ``Timeout.timeout``)
and stay the template's, so a resubmitted job with a longer timeout or
another patience uses the new value. A callback with no state field is not
stored at all (see :func:`stateful`).
"""

from __future__ import annotations

import netket as nk
from netket.utils.struct import Pytree

from .. import registry
from ._common import pytree_fields


def state_fields(cls) -> tuple[str, ...]:
    return tuple(f for f in pytree_fields(cls) if f.startswith("_"))


def stateful(callback) -> bool:
    """Whether a checkpoint keeps anything of ``callback``."""
    cls = type(callback)
    return isinstance(callback, Pytree) and isinstance(callback, nk.callbacks.AbstractCallback) \
        and bool(state_fields(cls))


def _callback_rule(cls):
    if not (isinstance(cls, type) and issubclass(cls, nk.callbacks.AbstractCallback)
            and issubclass(cls, Pytree)):
        return None
    fields, state = pytree_fields(cls), state_fields(cls)

    def to_state(obj):
        return {f: getattr(obj, f) for f in fields}

    def from_state(template, restored):
        return template.replace(**{f: restored[f] for f in state})

    # the name and fields are those the generic pytree rule gave callbacks
    # before this rule existed, so older checkpoints load unchanged
    return registry.Registration(
        f"{cls.__module__}.{cls.__qualname__}", 1, to_state, from_state,
        doc="NetKet callback: the fields NetKet marks serializable; on load the "
            "underscored ones (state) are restored, the others (configuration) are the template's")


registry.add_rule(_callback_rule)
