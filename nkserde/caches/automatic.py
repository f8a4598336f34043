"""The compilation caches a script gets without asking: the script as the
README shows it (``import netket as nk``, ``import nkserde``, the driver
built, a Checkpoint) restarts with its compiled code, the template's build
included, which a Checkpoint made after the build cannot cache.

    automatic.install()   # at ``import nkserde``
    automatic.complete()  # when nkserde's API loads (nkserde/_public.py)

Two steps, each done once per process:

* JAX, as soon as NetKet is imported (at once if it was before ``import
  nkserde``; else by a finder on ``sys.meta_path`` that waits for ``import
  netket`` and leaves when it has run): its persistent compilation cache is
  pointed at the user's cache directory
  (:func:`nkserde.caches.jax_executables.use`), so every compilation from
  then on is cached, the template's build first. JAX makes the directory
  when it writes its first entry: a process that compiles nothing
  (``nkserde inspect``, ``nkserde.load`` of a file) leaves nothing on disk.
  Not at JAX's import: NetKet's own import compiles constants (17 small
  computations in NetKet 3.23), which would leave a cache behind every
  program that reads a file.
* the rest (:func:`nkserde.caches.use_default`: numba's cache of NetKet's
  kernels, the fingerprint's kept probes, a jax LocalOperator's tables,
  the bounds) when nkserde's API loads, which a script that checkpoints
  does before its first step.

Neither happens where ``NKSERDE_COMPILATION_CACHE=off`` (read when NetKet
is imported), where the user configured JAX's cache (``JAX_COMPILATION_CACHE_DIR``,
``jax.config.update("jax_compilation_cache_dir", ...)`` before) or turned
it off (``JAX_ENABLE_COMPILATION_CACHE=0``): theirs is left as it is.
``import nkserde`` imports no JAX for this. Whatever goes wrong here is one
debug line (logger ``"nkserde"``) and no cache, never a failed import.
"""

from __future__ import annotations

import importlib.util
import os
import sys

_engaged = False  # whether the first step pointed JAX at nkserde's cache


def install() -> None:
    """Points JAX at the user's cache now if NetKet is imported, else when
    it is (the first step above)."""
    if "netket" in sys.modules and "jax" in sys.modules:
        _point_jax()
    elif not any(isinstance(finder, _AfterNetKetImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterNetKetImport())


def complete() -> None:
    """The second step: the rest of the caches, beside JAX's, if the first
    step pointed JAX at nkserde's."""
    if not _engaged:
        return
    try:
        from . import use_default

        use_default()
    except Exception as error:  # noqa: BLE001  (a cache is an optimisation: loading nkserde's API must not fail)
        _say(f"the caches beside JAX's are not set ({type(error).__name__}: {error})")


def engaged() -> bool:
    """Whether JAX's cache is the one this module set."""
    return _engaged


def _point_jax() -> None:
    global _engaged
    try:
        from . import jax_executables  # (JAX is imported: NetKet imports it)

        if os.environ.get(jax_executables.ENVIRONMENT, "").strip().lower() == "off":
            return
        before = jax_executables.configured()
        path = jax_executables.use(None, max_bytes=None)  # pruned at complete(): not in the middle of an import
        _engaged = before is None and path is not None
    except Exception as error:  # noqa: BLE001  (whatever it is, ``import netket`` must not fail because of nkserde)
        _say(f"JAX's compilation cache is not set ({type(error).__name__}: {error})")


def _say(message: str) -> None:
    import logging  # (not at ``import nkserde``: it costs milliseconds)

    logging.getLogger("nkserde").debug("%s: compiled code is not cached", message)


# A finder and loader by protocol, not by importlib.abc's base classes
# (importing importlib.abc costs ~10 ms of every ``import nkserde``).
class _AfterNetKetImport:
    """Finds nothing itself: at ``import netket`` it takes the spec the
    other finders give and wraps its loader so that :func:`_point_jax` runs
    once netket's ``__init__`` has, then leaves ``sys.meta_path``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "netket":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # the other finders' (this one has left)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenPointJax(spec.loader)
        return spec


class _ThenPointJax:
    """netket's own loader, then :func:`_point_jax`; the module keeps its
    own loader as its ``__loader__`` (this one only runs the import)."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _point_jax()

    def __getattr__(self, name):  # anything else asked of the loader meanwhile (resources)
        return getattr(self.loader, name)
