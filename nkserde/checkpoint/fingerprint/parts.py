"""The parts of a Python object, as the fingerprint walks them: a
container's items, a NamedTuple's or dataclass's or NetKet Pytree's fields,
the values a function closes over, a ``functools.partial``'s arguments;
and the names of objects and functions."""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping

from ...netket import internals

MAX_DEPTH = 10  # objects nested deeper are described as "..."


def class_name(obj) -> str:
    """The qualified name of ``obj``'s class (of the class a driver of
    :func:`nkserde.checkpointed` wraps)."""
    # checkpointed() gives a driver a subclass made at run time: name the class it wraps
    cls = next(c for c in type(obj).__mro__ if not c.__dict__.get("_nkserde_wrapper", False))
    return cls.__qualname__


def type_name(value) -> str:
    """A function's qualified name, ``partial``, or the class name."""
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return value.__qualname__
    if isinstance(value, functools.partial):
        return "partial"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str) and not isinstance(value, type):
        return name  # jitted or custom_jvp functions carry their function's name
    return class_name(value)


def _wrapped_function(value):
    """The function a jitted or custom_jvp function wraps, or None."""
    wrapped = getattr(value, "__wrapped__", None) or getattr(value, "fun", None)
    return wrapped if callable(value) and wrapped is not None and callable(wrapped) else None


def is_function(value) -> bool:
    """Whether ``value`` is a function (a partial, a bound method, a jitted
    function), not a class or another callable object."""
    if isinstance(value, type):
        return False
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)):
        return True
    return _wrapped_function(value) is not None  # jit, custom_jvp


def children(value, defaults=False) -> list[tuple[str, object]]:
    """The parts of ``value`` as ``(name, part)``. A function's are the
    values it closes over (and, with ``defaults``, its defaults: what
    version 2 listed)."""
    if isinstance(value, Mapping):
        return sorted(((str(k), v) for k, v in value.items()), key=lambda kv: kv[0])
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # NamedTuple (optax)
        return list(value._asdict().items())
    if isinstance(value, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(value)]
    if isinstance(value, functools.partial):
        return [("func", value.func), *((str(i), a) for i, a in enumerate(value.args)), *sorted(value.keywords.items())]
    if isinstance(value, types.MethodType):
        return [("function", value.__func__)]
    if isinstance(value, types.FunctionType):
        return _function_parts(value, defaults)
    wrapped = _wrapped_function(value)
    if wrapped is not None:  # jit, custom_jvp
        return [("function", wrapped)]
    fields = internals.pytree_fields(type(value))
    if fields is not None:  # NetKet Pytree
        return [(f, getattr(value, f)) for f in fields if hasattr(value, f)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value) if hasattr(value, f.name)]
    if hasattr(value, "__dict__") and not callable(value) and not isinstance(value, types.ModuleType):
        return sorted((k, v) for k, v in vars(value).items() if not k.startswith("__"))
    return []


def _function_parts(f: types.FunctionType, defaults: bool) -> list[tuple[str, object]]:
    parts = []
    if f.__closure__:
        for name, cell in zip(f.__code__.co_freevars, f.__closure__):
            try:
                parts.append((name, cell.cell_contents))
            except ValueError:  # an empty cell
                continue
    if defaults:
        for i, default in enumerate(f.__defaults__ or ()):
            parts.append((f"default{i}", default))
        parts += sorted((f.__kwdefaults__ or {}).items())
    return parts
