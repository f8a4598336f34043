"""The registrations nkserde brings besides NetKet's: JAX's typed PRNG keys
and NamedTuples (optax's states among them), stored under the names and
schemas docs/schema.md lists, through the calls any other registration
uses (``registry.register``, ``registry.add_rule``). Imported by the walks
of a save and of a load (saving/snapshot.py, loading/walk.py), before any
walk."""

from __future__ import annotations

import jax

from . import registry
from ..errors import TemplateMismatchError


class KeyArray:
    """Stands for JAX's typed PRNG key arrays (``jax.random.key(...)``) in
    the registry: they are ``jax.Array``s of a class JAX keeps private,
    told apart by their dtype (:func:`is_key_array`), so the walks look a
    key array up as this type. Never instantiated."""


def is_key_array(x) -> bool:
    """Whether ``x`` is a typed PRNG key array (stored as a :class:`KeyArray`)."""
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _key_to_state(key):
    return {"impl": str(jax.random.key_impl(key)), "data": jax.random.key_data(key)}


def _key_from_state(template, fields):
    impl = str(jax.random.key_impl(template))
    # The file's impl is compared, never used to pick code.
    if fields["impl"] != impl:
        raise TemplateMismatchError(f"PRNG key implementation {fields['impl']!r} in file, {impl!r} in template")
    return jax.random.wrap_key_data(fields["data"], impl=jax.random.key_impl(template))


registry.register(
    KeyArray,
    name="jax.random.key",
    version=1,
    to_state=_key_to_state,
    from_state=_key_from_state,
    fields=("impl", "data"),
    doc=(
        "`impl`: str, PRNG implementation (compared with the template's, never used to choose "
        "code); `data`: uint32 key data"
    ),
)


def _namedtuple_rule(cls):
    """A NamedTuple class's registration (its fields by name), or None."""
    if not (issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_asdict")):
        return None
    top = cls.__module__.split(".")[0]
    # optax moves its state classes between private modules; its public
    # namespace is stable, so name optax states by it.
    name = f"optax.{cls.__qualname__}" if top == "optax" else registry.module_path(cls)
    return registry.Registration(
        name,
        1,
        lambda t: t._asdict(),
        lambda template, f: type(template)(**f),
        doc="NamedTuple: one entry per field, in the tuple's own field names",
    )


registry.add_rule(_namedtuple_rule)
