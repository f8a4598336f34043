"""Configuration that NetKet places inside state pytrees: operators,
observables, Hilbert spaces, graphs, samplers, symmetry groups.

They are what the script builds, never what a run changes, so they come from
the template: the file records only their kind (a node with no fields) and a
load keeps the template's object. NetKet's own Infidelity example, for one,
builds a target state whose model state holds an ``IsingJax`` operator.
"""

from __future__ import annotations

import netket as nk
from netket.utils.group import FiniteGroup

from ..types import registry

# operators and every other observable (NetKet keeps their common base private)
_OBSERVABLE = next(
    (c for c in nk.operator.AbstractOperator.__mro__ if c.__name__ == "AbstractObservable"),
    nk.operator.AbstractOperator,
)

_KINDS = {  # class: (name, doc)
    _OBSERVABLE: ("netket.operator", "none: any operator or observable"),
    nk.hilbert.AbstractHilbert: ("netket.hilbert", "none: a Hilbert space"),
    nk.graph.AbstractGraph: ("netket.graph", "none: a graph or lattice"),
    nk.sampler.Sampler: ("netket.sampler", "none: a sampler"),
    FiniteGroup: ("netket.symmetry_group", "none: a symmetry group"),
}


def _no_fields(obj) -> dict:
    # the file records the kind alone; a load keeps the template's object
    return {}


def _the_template(template, fields):
    return template


for _cls, (_name, _doc) in _KINDS.items():
    registry.register(
        _cls,
        name=_name,
        version=1,
        to_state=_no_fields,
        from_state=_the_template,
        fields=(),
        subclasses=True,
        doc=_doc,
    )
