"""Callbacks of ``netket.callbacks`` (EarlyStopping, ConvergenceStopping,
InvalidLossStopping) and users' own: what a checkpoint keeps of them.

Only a callback's *state* is stored and restored (the best loss so far, a
patience counter); its configuration (``patience``, ``Timeout.timeout``)
stays the template's, so a resubmitted job with a longer timeout or another
patience uses the new value. A callback with no state is not stored at all
(see :func:`stateful`).

NetKet's own callbacks have nkserde schemas (NetKet moved them between
modules in 3.22 and changed which fields it marks serializable); callbacks
of other libraries and users' are stored as the fields their class marks
serializable, restoring the underscored ones, under the class's module path
(``__main__.MyCallback``), which nkserde compares and never imports.
"""

from __future__ import annotations

import collections

import netket as nk
from netket.utils.struct import Pytree

from ..types import registry
from . import internals
from ..types.registry import module_path
from ._common import find, refusing_to_drop_run_state, register_attributes

_CALLBACK_BASE = find("netket.callbacks.AbstractCallback")  # NetKet >= 3.22


def _nkserde_01_name(cls, module: str) -> str:
    """The name nkserde 0.1 wrote: the module path under NetKet 3.23, the
    only NetKet it supported (whatever NetKet reads the file now)."""
    return f"netket._src.callbacks.{module}.{cls.__name__}"


def _register_state(cls, fields: dict, *, module: str, version=1, optional=(), doc=""):
    """A NetKet callback stored as ``fields`` (nkserde name -> attribute)."""
    register_attributes(
        cls,
        f"netket.callbacks.{cls.__name__}",
        fields,
        version=version,
        optional=optional,
        immutable=True,
        aliases=(_nkserde_01_name(cls, module),),
        doc=doc,
    )


_register_state(
    nk.callbacks.EarlyStopping,
    {"_best_val": "_best_val", "_best_iter": "_best_iter", "_best_patience_counter": "_best_patience_counter"},
    module="early_stopping",
    doc=(
        "`_best_val`: float, the best loss so far; `_best_iter`: int, its step; `_best_patience_counter`: "
        "int, the steps since a better loss"
    ),
)

_register_state(
    nk.callbacks.InvalidLossStopping,
    {"_last_valid_iter": "_last_valid_iter"},
    module="invalid_loss_stopping",
    doc="`_last_valid_iter`: int, the last step with a finite loss",
)


# ConvergenceStopping keeps its recent losses as a deque (NetKet 3.21, 3.22) or
# as a fixed-length tuple and a fill count (3.23); the schema is the losses.


def _recent_losses(obj) -> list:
    window = obj._loss_window
    if hasattr(obj, "_n_losses"):
        return [float(x) for x in window[len(window) - obj._n_losses :]] if obj._n_losses else []
    return [float(x) for x in window]


def _convergence_to_state(obj) -> dict:
    return {"recent_losses": _recent_losses(obj), "patience_counter": obj._patience_counter}


def _convergence_from_state(template, restored):
    losses = [float(x) for x in restored["recent_losses"]][-template.smoothing_window :]
    if hasattr(template, "_n_losses"):
        window = (0.0,) * (template.smoothing_window - len(losses)) + tuple(losses)
        return template.replace(
            _loss_window=window, _n_losses=len(losses), _patience_counter=restored["patience_counter"]
        )
    return template.replace(
        _loss_window=collections.deque(losses, maxlen=template.smoothing_window),
        _patience_counter=restored["patience_counter"],
    )


registry.register(
    nk.callbacks.ConvergenceStopping,
    name="netket.callbacks.ConvergenceStopping",
    version=2,
    to_state=_convergence_to_state,
    from_state=_convergence_from_state,
    fields=("recent_losses", "patience_counter"),
    free_fields=("recent_losses",),
    aliases=(_nkserde_01_name(nk.callbacks.ConvergenceStopping, "convergence_stopping"),),
    doc=(
        "`recent_losses`: list of float, the last losses (at most `smoothing_window`), oldest "
        "first; `patience_counter`: int"
    ),
)


@registry.migration("netket.callbacks.ConvergenceStopping", from_version=1)
def _convergence_v1(fields):
    # version 1: NetKet 3.23's own fields, a fixed-length window and its fill count
    window, filled = list(fields.pop("_loss_window")), int(fields.pop("_n_losses"))
    fields["recent_losses"] = window[len(window) - filled :] if filled else []
    fields["patience_counter"] = fields.pop("_patience_counter")
    return fields


def stateful(callback) -> bool:
    """Whether a checkpoint keeps anything of ``callback``."""
    cls = type(callback)
    if _CALLBACK_BASE is None or not isinstance(callback, _CALLBACK_BASE):
        return False
    reg = registry.lookup(cls)
    if reg is None:
        return False
    return bool(reg.fields) if reg.fields else bool(_state_fields(cls))


def _state_fields(cls) -> tuple[str, ...]:
    return tuple(f for f in internals.serialized_fields(cls) if f.startswith("_")) if issubclass(cls, Pytree) else ()


def _callback_rule(cls):
    """Callbacks without a registration of their own (users', other
    libraries'): the fields their class marks serializable."""
    if not (
        _CALLBACK_BASE is not None
        and isinstance(cls, type)
        and issubclass(cls, _CALLBACK_BASE)
        and issubclass(cls, Pytree)
    ):
        return None
    fields, state = internals.serialized_fields(cls), _state_fields(cls)
    dropped = tuple(f for f in internals.pytree_fields(cls) if f not in fields)

    def from_state(template, restored):
        return template.replace(**{f: restored[f] for f in state})

    name = f"netket.callbacks.{cls.__name__}" if cls.__module__.startswith("netket.") else module_path(cls)
    return registry.Registration(
        name,
        1,
        refusing_to_drop_run_state(cls, fields, dropped),
        from_state,
        aliases=(module_path(cls),),
        doc="callback: the fields its class marks serializable; on load the "
        "underscored ones (state) are restored, the others (configuration) are the template's",
    )


registry.add_rule(_callback_rule)
