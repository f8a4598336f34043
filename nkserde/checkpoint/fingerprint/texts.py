"""How values become an entry's text: numbers in words, hashes, digests of
computed numbers that ignore their last bits, reprs without addresses."""

from __future__ import annotations

import hashlib
import re

import numpy as np

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def sha(data: bytes) -> str:
    """The first 16 hex digits of ``data``'s SHA-256."""
    return hashlib.sha256(data).hexdigest()[:16]


def entries_digest(entries: dict[str, str]) -> str:
    """:func:`sha` of a description's entries, in key order."""
    return sha(repr(sorted(entries.items())).encode())


def without_addresses(obj) -> str:
    """``repr(obj)`` without the memory addresses it may hold."""
    return _ADDRESS.sub("", repr(obj))


def number(v: complex, digits: int = 10) -> str:
    """``1.0``, ``-0.5``, ``0.3`` (not ``0.30000000000000004``), ``1.0+2.0j``."""
    v = complex(v)

    def real(x):
        text = f"{x:.{digits}g}"
        return text if any(c in text for c in ".einn") else f"{text}.0"

    if abs(v.imag) <= 1e-12 * max(1.0, abs(v.real)):
        return real(v.real)
    return f"{real(v.real)}{'+' if v.imag >= 0 else '-'}{real(abs(v.imag))}j"


def quantized_digest(arrays) -> str:
    """A hash of numbers, each rounded to 9 significant digits of the
    largest: the last bits a JAX or XLA release computes otherwise do not
    change it."""
    values = np.concatenate([np.ravel(a).astype(complex) for a in arrays])
    parts = np.concatenate([values.real, values.imag])
    finite = parts[np.isfinite(parts)]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    scale = scale or 1.0
    tokens = [f"{scale:.9g}"]
    for x in parts:
        tokens.append(str(int(np.round(x / scale * 1e9)) + 0) if np.isfinite(x) else str(x))
    return sha(",".join(tokens).encode())
