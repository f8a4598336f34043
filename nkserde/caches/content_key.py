"""Keys of results computed from objects: a digest of everything that
decides what a function of the objects returns, or None where that cannot
be told. The keys of :mod:`nkserde.caches.results` that spare a resumed run
the fingerprint's probes (run_fingerprint).

    content_key.key("call", f, x)  # -> "3f2a..." or None

An object is described by its content, strictly, and a key is made only
when every part is described; anything else gives None (the caller
computes), so two objects with one key compute one result:

* numbers, strings, None; numpy and JAX arrays by dtype, shape and bytes
  (JAX's PRNG keys by their data; a traced or non-addressable array: none);
* tuples, lists, dicts and mappings, ``functools.partial``, bound methods,
  item by item;
* functions, classes and other named things only from the packages whose
  code is pinned by the key (:data:`PACKAGES`): a function by its module,
  name, code (its bytecode and constants: the two branches of an ``if``
  that define one name differ), defaults and the values it closes over; a
  class by name; an object of a class of those packages by its class and
  its attributes (``__dict__`` and slots; not a cached ``hash()``, which
  differs in every process). A function, class or object of
  any other module (the user's script, an editable package of one's own)
  gives no key.

The key also holds what the packages' code and JAX's numbers depend on:
the releases of Python and of :data:`PACKAGES`, a stamp of NetKet's and
nkserde's source files (:mod:`nkserde.caches.source_stamp`: an editable install
edited), the CPU kind and JAX's backend, and ``jax_enable_x64``.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import platform
import re
import sys
import types
from collections.abc import Mapping

import jax
import numpy as np

from . import jax_executables, source_stamp

# packages whose code the key pins by release (and NetKet's and nkserde's
# by their source files too)
PACKAGES = ("netket", "jax", "jaxlib", "flax", "optax", "chex", "numpy", "scipy", "nkserde")
_STAMPED = ("netket", "nkserde")
_BUILTIN_MODULES = {"builtins", "math", "cmath", "operator", "functools"}
_MAX_DEPTH = 40
_MAX_NODES = 200_000  # objects described for one key: a larger (or much shared) graph gets none
_SCALARS = (type(None), bool, int, float, complex, str)
# attributes that cache an object's hash(): another in every process (PYTHONHASHSEED)
_CACHED_HASH = re.compile(r"^_+hash(_value)?_*$")


class _Opaque(Exception):
    """Something that cannot be described by its content."""


def key(kind: str, *parts) -> str | None:
    """A key of what a computation named ``kind`` returns for ``parts``,
    None if some part cannot be described (see the module doc)."""
    try:
        budget = [_MAX_NODES]
        described = [_content(p, 0, (), budget) for p in parts]
        text = json.dumps([kind, _environment(), bool(jax.config.jax_enable_x64), described], separators=(",", ":"))
    except _Opaque:
        return None
    except Exception:  # noqa: BLE001  (a property that fails, a deleted array: no key, the probe runs)
        return None
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def _environment() -> tuple:
    versions = []
    for name in PACKAGES:
        module = sys.modules.get(name)
        versions.append([name, getattr(module, "__version__", None) if module is not None else None])
    stamps = [[name, source_stamp.of_package(name)] for name in _STAMPED]
    return (
        platform.python_version(),
        versions,
        stamps,
        platform.machine(),
        jax_executables.cpu_kind(),
        jax.default_backend(),
    )


def _top(module) -> str:
    return (module or "").split(".")[0] if isinstance(module, str) else ""


def _pinned(module) -> bool:
    return _top(module) in PACKAGES


def _class(cls) -> list:
    module, name = getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)
    if not isinstance(name, str) or not (_pinned(module) or module in _BUILTIN_MODULES):
        raise _Opaque(cls)
    return [module, name]


def _code(code: types.CodeType) -> str:
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    h.update(repr(code.co_varnames).encode())
    for const in code.co_consts:
        h.update(_code(const).encode() if isinstance(const, types.CodeType) else repr(const).encode())
    return h.hexdigest()


def _content(v, depth: int, path: tuple, budget: list):
    """``v``'s content as JSON-able lists, the input of its key; raises
    _Opaque where it cannot be told (too deep, too large, not content)."""
    budget[0] -= 1
    if depth > _MAX_DEPTH or budget[0] < 0:
        raise _Opaque(v)
    if type(v) in _SCALARS:
        return [type(v).__name__, repr(v)]
    if id(v) in path:  # a function closing over itself, an object holding its parent
        return ["ref", path.index(id(v))]
    if type(v) is bytes:
        return ["bytes", v.hex()]
    if isinstance(v, np.dtype):
        return ["dtype", repr(v)]
    if isinstance(v, np.generic):
        if v.dtype == object:
            return _content(v.item(), depth, path, budget)
        return ["scalar", v.dtype.str, v.tobytes().hex()]
    if type(v) is np.ndarray:
        if v.dtype == object:
            return ["objects", list(v.shape), [_content(x, depth + 1, path, budget) for x in v.ravel().tolist()]]
        return ["array", v.dtype.str, list(v.shape), hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()]
    if isinstance(v, jax.Array):
        if not getattr(v, "is_fully_addressable", True):
            raise _Opaque(v)  # (a traced one: np.asarray raises)
        if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key):
            return ["key", str(v.dtype), _content(np.asarray(jax.random.key_data(v)), depth, path, budget)]
        return ["jax", _content(np.asarray(v), depth, path, budget)]
    path = (*path, id(v))
    down = functools.partial(_content, depth=depth + 1, path=path, budget=budget)
    if type(v) in (tuple, list):
        return [type(v).__name__, [down(x) for x in v]]
    if type(v) is dict:
        return ["dict", _items(v, down)]
    if isinstance(v, type):
        return ["class", _class(v)]
    if isinstance(v, enum.Enum):
        return ["enum", _class(type(v)), v.name]
    if isinstance(v, functools.partial):
        return ["partial", _class(type(v)), down(v.func), [down(a) for a in v.args], _items(v.keywords, down)]
    if isinstance(v, types.MethodType):
        return ["method", down(v.__func__), down(v.__self__)]
    if isinstance(v, types.FunctionType):
        if not _pinned(v.__module__):
            raise _Opaque(v)
        cells = []
        for cell in v.__closure__ or ():
            try:
                cells.append(down(cell.cell_contents))
            except ValueError:  # a cell not yet filled
                cells.append(["empty"])
        return [
            "function",
            v.__module__,
            v.__qualname__,
            _code(v.__code__),
            down(v.__defaults__),
            _items(v.__kwdefaults__ or {}, down),
            cells,
        ]
    if isinstance(v, (types.BuiltinFunctionType, np.ufunc)):
        module = getattr(v, "__module__", None) or ("numpy" if isinstance(v, np.ufunc) else None)
        if not (_pinned(module) or module in _BUILTIN_MODULES):
            raise _Opaque(v)
        return ["builtin", module, getattr(v, "__qualname__", v.__name__), down(getattr(v, "__self__", None))]
    cls = _class(type(v))  # an object: only of a class of the pinned packages
    if isinstance(v, tuple):  # a NamedTuple (optax's transformations and states)
        return ["tuple", cls, [down(x) for x in v]]
    if _named(v):  # a module-level function object (jax.jit's, custom_jvp's): its name says it
        return ["named", v.__module__, v.__qualname__]
    if isinstance(v, Mapping):
        return ["mapping", cls, _items(dict(v.items()), down)]
    attributes = {k: x for k, x in vars(v).items() if not _CACHED_HASH.match(k)} if hasattr(v, "__dict__") else {}
    for klass in type(v).__mro__:
        for slot in getattr(klass, "__slots__", ()) or ():
            if slot not in ("__dict__", "__weakref__") and hasattr(v, slot):
                attributes[f"slot {slot}"] = getattr(v, slot)
    if not attributes and not hasattr(v, "__dict__"):
        raise _Opaque(v)  # state kept where Python does not show it (a C extension's)
    return ["object", cls, _items(attributes, down)]


def _items(mapping, down) -> list:
    items = [(down(k), down(x)) for k, x in mapping.items()]
    return sorted(items, key=lambda kv: json.dumps(kv[0]))


def _named(v) -> bool:
    """Whether ``v`` is what its module's attribute of its name is."""
    module, name = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
    if not _pinned(module) or not isinstance(name, str) or "<" in name:
        return False
    target = sys.modules.get(module)
    for part in name.split("."):
        target = getattr(target, part, None)
    return target is v
