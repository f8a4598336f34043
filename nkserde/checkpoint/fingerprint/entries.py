"""A fingerprint's entries: a flat ``{key: text}`` dict (keys dotted by
object, ``model.alpha``), and what its texts begin with.

An entry whose key holds :data:`READABLE` (``"operator | h"``) is
*readable*: it says in the user's words what the decisive entry before the
``" | "`` stands for, and never decides on its own.
"""

from __future__ import annotations

import re

VERSION = 3  # of the fingerprint's keys and texts
COMPARED_VERSIONS = ("2", "3")  # 2 through upgrade(); older fingerprints are not compared
READABLE = " | "  # "<key> | <label>": a readable entry of the object at <key>

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
    return {k: v for k, v in fp.items() if READABLE not in k and k != "fingerprint_version"}


def direct_children(fp: dict, key: str) -> dict[str, str]:
    """The entries one level below ``key`` by their last name (but readable
    ones and a function's version 2 defaults)."""
    depth = key.count(".") + 1
    below = {k.rsplit(".", 1)[1]: v for k, v in fp.items() if k.startswith(f"{key}.") and k.count(".") == depth}
    return {name: v for name, v in below.items() if READABLE not in name and not DEFAULT.match(name)}


def is_hash(text: str) -> bool:
    """Whether a decisive text is a hash of a probe (says nothing itself)."""
    return text.startswith((CONTENT, EFFECT, FUNCTION))
