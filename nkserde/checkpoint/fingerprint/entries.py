"""A fingerprint's entries: a flat ``{key: text}`` dict (keys dotted by
object, ``model.alpha``), what its texts begin with, and how values become
those texts (numbers in words, hashes, digests of computed numbers that
ignore their last bits, reprs without addresses).

An entry whose key holds :data:`READABLE` (``"operator | h"``) is
*readable*: it says in the user's words what the decisive entry before the
``" | "`` stands for, and never decides on its own.
"""

from __future__ import annotations

import hashlib
import re
import numpy as np

VERSION = 3  # of the fingerprint's keys and texts
COMPARED_VERSIONS = ("2", "3")  # 2 through upgrade(); older fingerprints are not compared
READABLE = " | "  # "<key> | <label>": a readable entry of the object at <key>
# the platform the probes computed on where the process had no CPU backend
# (JAX_PLATFORMS=tpu alone); absent: the host's CPU, as everywhere else
PROBES_ON = "probes_on"

KIND = "kind"  # the readable label of an object's kind
VERSION_2 = "version 2 text"  # what version 2 wrote where version 3 writes otherwise (never shown)

# decisive texts that are hashes
EFFECT = "effect "  # an optimizer's effect on the probe
FUNCTION = "function "  # a function's effect on the probe
CONTENT = "content "  # an operator's action

QUANTIZED = "~"  # a float array's digest of its values to 9 digits (version 2: of its bytes)
DEFAULT = re.compile(r"^default\d+$")  # a function's positional defaults (version 2)
# a function a factory returns: "adam.<locals>.update_fn"
LOCAL_FUNCTION = re.compile(r"^(?P<factory>[A-Za-z_]\w*)\.<locals>\.(?P<function><?[A-Za-z_]\w*>?)$")


def add_readable(fp: dict, key: str, labels: dict[str, str]) -> None:
    """Adds ``labels`` as the readable entries of ``key``, in their order."""
    fp.update({f"{key}{READABLE}{label}": text for label, text in labels.items()})


def readable(fp: dict, key: str) -> dict[str, str]:
    """The readable entries of ``key``: ``{label: text}``."""
    prefix = f"{key}{READABLE}"
    return {k[len(prefix) :]: v for k, v in fp.items() if k.startswith(prefix)}


def decisive(fp: dict) -> dict[str, str]:
    """The entries that decide (neither readable nor the version)."""
    return {k: v for k, v in fp.items() if READABLE not in k and k not in ("fingerprint_version", PROBES_ON)}


def direct_children(fp: dict, key: str) -> dict[str, str]:
    """The entries one level below ``key`` by their last name (but readable
    ones and a function's version 2 defaults)."""
    depth = key.count(".") + 1
    below = {k.rsplit(".", 1)[1]: v for k, v in fp.items() if k.startswith(f"{key}.") and k.count(".") == depth}
    return {name: v for name, v in below.items() if READABLE not in name and not DEFAULT.match(name)}


def is_hash(text: str) -> bool:
    """Whether a decisive text is a hash of a probe (says nothing itself)."""
    return text.startswith((CONTENT, EFFECT, FUNCTION))


# ------------------------------------------------------------------ texts


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
