"""What the probes computed (an operator's action, a function on its fixed
inputs, an optimizer's updates), kept in the result cache
(:mod:`nkserde.caches.results`, set with the compilation cache) and keyed by
:mod:`nkserde.caches.content_key`: a resumed process takes them from
there instead of computing them with JAX again; the fingerprint is the
same either way."""

from __future__ import annotations

import numpy as np

from ...caches import content_key, results as result_cache
from .entries import VERSION


def memoized(kind: str, parts: tuple, compute, encode, decode):
    """``compute()``, or what it returned in an earlier process for the same
    ``parts`` (:func:`nkserde.caches.results.memoized`, keyed by
    :func:`nkserde.caches.content_key.key`: nothing is kept where a
    part cannot be described by its content, or without a cache)."""
    key = content_key.key(f"fingerprint {VERSION} {kind}", *parts) if result_cache.directory() is not None else None
    return result_cache.memoized(key, compute, encode, decode)


def not_a_stored_result():
    """Raises what a decoder raises for a kept value it does not recognise."""
    raise ValueError("not a stored result")


def encode_numbers(a: np.ndarray | None):
    """Complex numbers (1-d) as JSON: ``[real parts, imaginary parts]``."""
    return None if a is None else [a.real.tolist(), a.imag.tolist()]


def decode_numbers(stored) -> np.ndarray | None:
    """The inverse of :func:`encode_numbers` (ValueError: not its output)."""
    if stored is None:
        return None
    real, imag = (np.asarray(part, dtype=float) for part in stored)
    if real.ndim != 1 or real.shape != imag.shape:
        not_a_stored_result()
    out = np.empty(real.shape, complex)
    out.real, out.imag = real, imag
    return out
