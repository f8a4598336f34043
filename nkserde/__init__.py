"""nkserde: save and restore everything a NetKet simulation needs.

Public API::

    nkserde.save(obj, path)              -> Path
    nkserde.load(template, path)         -> new object like template
    nkserde.load(template, path, at="state", strict=False, rename={...}, report=True)
                                         -> a part of the file, what matches, (object, LoadReport)
    nkserde.state_dict(obj)              -> nested dicts of numpy arrays / scalars
    nkserde.from_state_dict(template, sd)
    nkserde.load_state_dict(path)        -> the file's state dict, no template
    nkserde.info(path)                   -> dict of metadata
    nkserde.open(path)                   -> reader: f["state/parameters/Dense/kernel"], f.keys(), f.info
    nkserde.verify(path)                 -> info, after checking every checksum
    nkserde.register(cls, name=..., version=..., to_state=..., from_state=...)
    nkserde.migration(name, from_version)
    nkserde.migrate(src, dst=None)       -> rewrites a file at today's format and schemas
    nkserde.per_process(value, derive=None)   in a to_state: a value each JAX process has its own of
    nkserde.set_load_limits(max_load_bytes=None, max_header_bytes=None)   ceilings of a load
    nkserde.errors
    nkserde.Checkpoint(directory, every=50, ...)   NetKet callback: checkpoint and resume
    nkserde.EverySteps(n), EveryDuration("15min"), WithinBudget(0.01), a | b (SaveAny)
                                         when a Checkpoint saves (every=)
    nkserde.KeepLatest(n), KeepMultiples(k), a | b (KeepAny)
                                         which checkpoints it keeps (keep=)
    nkserde.checkpointed(driver, directory, ...)  the driver, checkpointing every run
    nkserde.compilation_cache(directory=None)     JAX's compiled code outlives the process
                                         (in the user's cache without a call: see below)
    nkserde.history(directory)           what a Checkpoint's loggers logged, every step across restarts:
                                         h["Energy"]["Mean"], h.restarts, pandas.DataFrame(h.table())

Every name above is loaded on its first use (``import nkserde`` itself
imports neither JAX nor NetKet, so ``nkserde inspect`` answers at once on a
login node); the first ``nkserde.save`` or ``nkserde.Checkpoint`` imports
them and registers NetKet's types, as ``import nkserde`` did before.

Compiled code outlives the process without a call: when NetKet is
imported (before or after nkserde), nkserde points JAX's persistent
compilation cache at the user's cache directory, unless the user
configured one or set ``NKSERDE_COMPILATION_CACHE=off``
(nkserde.caches.automatic); nothing is written before something compiles.
"""

import importlib
import importlib.util

from . import errors
from .caches import automatic as _automatic_caches

# compiled code cached from NetKet's import on, the template's build included
# (nkserde.caches.automatic; NKSERDE_COMPILATION_CACHE=off turns it off)
_automatic_caches.install()

__version__ = "0.1.0"
__all__ = [
    "Checkpoint",
    "EveryDuration",
    "EverySteps",
    "InitFrom",
    "JobOptions",
    "KeepAny",
    "KeepLatest",
    "KeepMultiples",
    "LoadReport",
    "PartialLoadWarning",
    "SaveAny",
    "WithinBudget",
    "checkpointed",
    "compilation_cache",
    "errors",
    "from_state_dict",
    "history",
    "info",
    "load",
    "load_state_dict",
    "migrate",
    "migration",
    "open",
    "per_process",
    "register",
    "save",
    "save_state_dict",
    "set_load_limits",
    "state_dict",
    "verify",
]


def _load_public_api() -> None:
    public = importlib.import_module(f"{__name__}._public")
    for name in __all__:
        if name not in globals():  # errors is imported above
            globals()[name] = getattr(public, name)


def __getattr__(name: str):
    # PEP 562: called for names not yet in this module. An API name loads
    # the API (and registers NetKet's types); a submodule's name
    # (``nkserde.format``, the package's own ``from . import saving``)
    # imports that module alone, as ``import nkserde.format`` does, so the
    # command line's header readers import neither JAX nor NetKet.
    if name in __all__:
        _load_public_api()
        return globals()[name]
    if not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
