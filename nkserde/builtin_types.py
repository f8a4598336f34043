"""The registrations nkserde brings besides NetKet's: JAX's typed PRNG keys
and NamedTuples (optax's states among them), stored under the names and
schemas docs/schema.md lists. Imported by tree.py, before any walk."""

from __future__ import annotations

import jax

from . import registry
from .errors import TemplateMismatchError


def _key_to_state(key):
    return {"impl": str(jax.random.key_impl(key)), "data": jax.random.key_data(key)}


def _key_from_state(template, fields):
    impl = str(jax.random.key_impl(template))
    # The file's impl is compared, never used to pick code.
    if fields["impl"] != impl:
        raise TemplateMismatchError(f"PRNG key implementation {fields['impl']!r} in file, {impl!r} in template")
    return jax.random.wrap_key_data(fields["data"], impl=jax.random.key_impl(template))


KEY_REGISTRATION = registry.Registration(
    "jax.random.key",
    1,
    _key_to_state,
    _key_from_state,
    fields=("impl", "data"),
    doc=(
        "`impl`: str, PRNG implementation (compared with the template's, never used to choose "
        "code); `data`: uint32 key data"
    ),
)
registry.add_builtin(KEY_REGISTRATION)


def _namedtuple_rule(cls):
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
