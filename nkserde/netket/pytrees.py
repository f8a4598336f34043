"""A rule for NetKet pytrees that have no registration of their own.

Internal NetKet state objects (the online loss statistics of VMC_SR, solver
states of the ODE integrators, Kahan sums, rule states of samplers, the SR
preconditioner's warm start) are stored field by field, with exactly the
fields NetKet itself marks as serializable, under the class's module path.
Their schema is NetKet's; it is versioned as 1 and documented as opaque.
The public objects a user checkpoints (variational states, sampler states,
drivers, integrators) have nkserde schemas of their own instead.
"""

from __future__ import annotations

import dataclasses

from netket.utils.struct import Pytree

from .. import registry
from ._common import pytree_fields


def _netket_pytree_rule(cls):
    if isinstance(cls, type) and issubclass(cls, Pytree):
        fields = pytree_fields(cls)
    elif dataclasses.is_dataclass(cls) and cls.__module__.startswith("netket"):
        fields = tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("pytree_node", True))
    else:
        return None

    def to_state(obj):
        return {f: getattr(obj, f) for f in fields}

    def from_state(template, restored):
        if isinstance(template, Pytree):
            return template.replace(**restored)
        return dataclasses.replace(template, **restored)

    return registry.Registration(
        f"{cls.__module__}.{cls.__qualname__}", 1, to_state, from_state,
        doc="opaque NetKet pytree: the fields NetKet marks serializable: " + ", ".join(fields))


registry.add_rule(_netket_pytree_rule)
