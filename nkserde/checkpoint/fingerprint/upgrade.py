"""Version 2 fingerprints (nkserde before fingerprint version 3) in version
3's keys, as far as their text allows.

Version 2 described functions by name, closure and defaults: its
optimizer description becomes readable hyperparameters, a function
described by name becomes the readable name and closure values of a probed
one, initializers and defaults are keys version 3 does not have, a
floating-point array, hashed by its bytes in version 2, is not compared,
and an operator on a space too large to count, which version 2 described by
its fields (that leave an IsingJax's couplings out), compares with what
version 2 writes for it (``"<key> | version 2 text"``, never shown). Where
version 2 has no decisive entry of an object (an optimizer's effect), the
readable entries that both have decide."""

from __future__ import annotations

import re

from . import optimizers
from .entries import EFFECT, FUNCTION, KIND, READABLE, VERSION, VERSION_2, add_readable, direct_children

_FLOAT_ARRAY_V2 = re.compile(r"^(float|complex|bfloat)\d*\[[\d, ]*\] [0-9a-f]{16}$")


def upgrade(saved: dict, current: dict) -> dict:
    """A version 2 fingerprint in version 3's keys, as far as its text
    allows (``current``, the run's version 3 fingerprint, says which keys
    are optimizers and probed functions); other versions as they are."""
    if saved.get("fingerprint_version") != "2":
        return saved
    old = dict(saved)
    for key, text in current.items():
        if key.endswith(f"{READABLE}{VERSION_2}"):
            decisive = key[: -len(f"{READABLE}{VERSION_2}")]
            if saved.get(decisive) == text:  # what version 2 writes for the run's own object
                old[decisive] = current[decisive]
            continue
        if READABLE in key:
            continue
        if _FLOAT_ARRAY_V2.match(saved.get(key, "")) and not _FLOAT_ARRAY_V2.match(text):
            del old[key]  # a hash of its bytes: not comparable with one of its values
            continue
        if text.startswith(EFFECT):  # an optimizer: v2 described its closures
            labels = optimizers.labels(saved, f"{key}.update")
            _drop(old, key)
            add_readable(old, key, labels)
        elif text.startswith(FUNCTION) and key in saved:  # v2: name, closure values and defaults
            labels = {KIND: saved[key], **direct_children(saved, key)}
            _drop(old, key)
            add_readable(old, key, labels)
    old["fingerprint_version"] = str(VERSION)
    return old


def _drop(fp: dict, key: str) -> None:
    """Removes ``key`` and the entries below it."""
    for k in [k for k in fp if k == key or k.startswith(f"{key}.")]:
        del fp[k]
