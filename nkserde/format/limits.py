"""Ceilings of one load, so that a damaged or hostile file costs an error,
never the machine's memory.

* ``max_header_bytes`` (default 16 MiB, env ``NKSERDE_MAX_HEADER_BYTES``):
  the msgpack header. Decoded, every byte of it can become a Python object
  of ~70 bytes; the headers of real NetKet states are a few KiB.
* ``max_load_bytes`` (default: the machine's physical memory, env
  ``NKSERDE_MAX_LOAD_BYTES``): the decoded bytes of all arrays of one load,
  as the index declares them, checked before anything is allocated.

Set them for the process with :func:`set_load_limits` (or the environment
variables, read at each load); the errors say which limit to raise.
"""

from __future__ import annotations

import dataclasses
import os

from ..errors import LoadLimitError

__all__ = ["DEFAULT_MAX_HEADER_BYTES", "MAX_ZSTD_RATIO", "LoadLimitError", "Limits", "current", "set_load_limits"]

DEFAULT_MAX_HEADER_BYTES = 16 << 20
# zstd cannot expand more than this: a block holds at most 128 KiB and takes
# at least 4 bytes (an RLE block: 3-byte header + 1 byte). A frame claiming
# more per stored byte lies.
MAX_ZSTD_RATIO = 1 << 15


@dataclasses.dataclass(frozen=True)
class Limits:
    max_header_bytes: int
    max_load_bytes: int


_override: dict = {}


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not POSIX
        return 1 << 40


def _env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer number of bytes") from None
    if n < 0:
        raise ValueError(f"{name}={value!r} must be >= 0")
    return n


def current() -> Limits:
    """The limits in force: :func:`set_load_limits`, else the environment,
    else the defaults."""
    return Limits(
        _override.get("max_header_bytes") or _env("NKSERDE_MAX_HEADER_BYTES", DEFAULT_MAX_HEADER_BYTES),
        _override.get("max_load_bytes") or _env("NKSERDE_MAX_LOAD_BYTES", _physical_memory()),
    )


def set_load_limits(*, max_load_bytes: int | None = None, max_header_bytes: int | None = None) -> Limits:
    """Sets the ceilings of every later load in this process; a limit left
    at None goes back to its environment variable or default
    (``nkserde.set_load_limits()`` resets both). Returns the limits that
    were in force::

        nkserde.set_load_limits(max_load_bytes=64 << 30)   # a 64 GB state on a big node
    """
    previous = current()
    for name, value in (("max_load_bytes", max_load_bytes), ("max_header_bytes", max_header_bytes)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise ValueError(f"{name} must be a positive int, got {value!r}")
        _override[name] = value
    return previous
