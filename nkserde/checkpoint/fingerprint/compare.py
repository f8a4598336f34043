"""Two fingerprints compared, each change worded in the user's words
(``operator: Ising h 1.0 -> 1.5``, ``optimizer: adam learning_rate 0.01 ->
0.02``, ``model: RBM alpha 1 -> 2``); a hash only where nothing readable
exists, with the object it stands for. A fingerprint of version 2 (nkserde
before version 3) is compared in version 3's keys, as far as its text
allows (:func:`upgrade`)."""

from __future__ import annotations

import dataclasses
import re

from . import optimizers
from .entries import (
    COMPARED_VERSIONS,
    CONTENT,
    EFFECT,
    FUNCTION,
    KIND,
    LOCAL_FUNCTION,
    PROBES_ON,
    READABLE,
    VERSION,
    VERSION_2,
    add_readable,
    decisive,
    direct_children,
    is_hash,
    readable,
)

_SHOWN_TERMS = 8  # term lines in one refusal, per operator
_CONTAINERS = {"dict", "FrozenDict", "list", "tuple", "partial"}
# names of the function a factory returns that say less than the factory's
_GENERIC_FUNCTIONS = {"schedule", "init", "init_fn", "update", "update_fn", "fn", "wrapper", "wrapped"}


@dataclasses.dataclass(frozen=True)
class Difference:
    """One change between two fingerprints: the entry ``key``, the
    readable ``label`` inside it ("" for the entry itself), the old and the
    new text (None: absent on that side) and the ``line`` that words it."""

    key: str
    label: str
    old: str | None
    new: str | None
    line: str


def comparable(saved: dict) -> bool:
    """Whether a stored fingerprint is compared at all (versions 2 and 3)."""
    return saved.get("fingerprint_version") in COMPARED_VERSIONS


def changes(old: dict, new: dict) -> list[str]:
    """The differences of :func:`differences`, one line each."""
    return [d.line for d in differences(old, new)]


def differences(old: dict, new: dict) -> list[Difference]:
    """What differs between the stored fingerprint ``old`` and the run's
    ``new``, in the user's words where they exist.

    Entries are compared where both fingerprints have them: a key on one
    side only (a field a library release added or removed) is not a
    change; the kind of each object is an entry of its own, so another
    model or sampler shows there. Readable entries explain the change of
    the entry they belong to; they decide only for an object whose decisive
    entry ``old`` lacks (a version 2 fingerprint's optimizer). A change
    inside an object that changed kind is not listed (the kind says it).

    Fingerprints whose probes computed on two platforms (:data:`PROBES_ON`)
    compare no probe: what both say of a probed object in words decides
    (its kind, the values it closes over, an optimizer's hyperparameters),
    also where one platform could not compute the probe at all (a TPU's
    float64) and named the function instead of hashing its values."""
    if not comparable(old) or not comparable(new):
        return []
    old = upgrade(old, new)
    old_decisive, new_decisive = decisive(old), decisive(new)
    changed = [k for k in sorted(set(old_decisive) & set(new_decisive)) if old_decisive[k] != new_decisive[k]]
    # an object version 2 described otherwise: its readable entries decide
    readable_only = sorted(k for k in new_decisive if k not in old_decisive and readable(old, k) and readable(new, k))
    probed_on_one_side: list[str] = []
    if old.get(PROBES_ON, "cpu") != new.get(PROBES_ON, "cpu"):
        # hashes of numbers two platforms' arithmetic computed: their readable entries decide
        hashes = [k for k in changed if is_hash(old_decisive[k]) and is_hash(new_decisive[k])]
        # a function or optimizer one platform could not probe (a TPU's float64): its name
        # and what it closes over there, against what the other says of it in words
        probed_on_one_side = [k for k in changed if is_hash(old_decisive[k]) != is_hash(new_decisive[k])]
        changed = [k for k in changed if k not in hashes and k not in probed_on_one_side]
        readable_only = sorted(readable_only + [k for k in hashes if readable(old, k) and readable(new, k)])
    found: list[Difference] = []
    for key in sorted(changed + readable_only + probed_on_one_side):
        if any(key.startswith(f"{other}.") for other in changed if other != key):
            continue  # inside an object that changed (another kind)
        if key in probed_on_one_side:
            found += _worded_differences(new, key, _said(old, key), _said(new, key), common_only=True)
            continue
        if key in readable_only:
            found += _readable_differences(old, new, key, common_only=True)
            continue
        # readable entries on one side only (a version 2 fingerprint) explain nothing
        explained = _readable_differences(old, new, key) if readable(old, key) and readable(new, key) else []
        if explained:
            found += explained
        else:
            old_text, new_text = old_decisive[key], new_decisive[key]
            if is_hash(old_text) != is_hash(new_text):  # probed on one side, on the same platform
                line = _probed_on_one_side_line(old, new, key)
            else:
                what = _what_a_hash_stands_for(old, new, key) if is_hash(new_text) else ""
                line = f"{_object_prefix(new, key)} {old_text} -> {new_text}{what}"
            found.append(Difference(key, "", old_text, new_text, line))
    # parameter shapes follow from the model: a change of the model says it
    for prefix in ("", "target."):
        if any(d.key.startswith(f"{prefix}model") for d in found):
            found = [d for d in found if d.key != f"{prefix}parameters"]
    return found


def _kind_or_text(fp: dict, key: str) -> str:
    """The readable kind of an object, else its decisive text (a name)."""
    return _short_name(readable(fp, key).get(KIND) or fp[key])


def _probed_on_one_side_line(old: dict, new: dict, key: str) -> str:
    """A function (or optimizer) the same platform probed for one
    fingerprint and not for the other: another one, or the same one that
    now computes on the probe's inputs, or no longer does."""
    a, b = _kind_or_text(old, key), _kind_or_text(new, key)
    if a != b:
        return f"{_object_prefix(new, key)} {a} -> {b}"
    if is_hash(old[key]):
        return f"{_object_prefix(new, key)} {a}: computed on the fingerprint's fixed inputs -> raises on them"
    return f"{_object_prefix(new, key)} {a}: raised on the fingerprint's fixed inputs -> computes on them"


def _said(fp: dict, key: str) -> dict[str, str]:
    """What ``fp`` says of the object at ``key`` in words: its readable
    entries; for a function it could not probe, the same labels from the
    entries that describe it (its name, the values it closes over, a
    probed function among them by its kind)."""
    said = readable(fp, key)
    said.pop(VERSION_2, None)
    if said:
        return said
    said = {KIND: fp[key]}
    for name, text in direct_children(fp, key).items():
        kind = readable(fp, f"{key}.{name}").get(KIND) if is_hash(text) else text
        if kind is not None:
            said[name] = kind
    return said


def _readable_differences(old: dict, new: dict, key: str, common_only: bool = False) -> list[Difference]:
    """The readable entries of ``key`` that differ (:func:`_worded_differences`)."""
    before, after = readable(old, key), readable(new, key)
    before.pop(VERSION_2, None), after.pop(VERSION_2, None)
    return _worded_differences(new, key, before, after, common_only)


def _worded_differences(
    new: dict, key: str, before: dict[str, str], after: dict[str, str], common_only: bool = False
) -> list[Difference]:
    """The labels of ``key`` whose texts differ between ``before`` and
    ``after`` (those of both only, with ``common_only``), the most telling
    first: the kind; else the numbers it is built from; else the values of
    a function; else the terms of an operator (a few)."""
    labels = sorted(set(before) & set(after)) if common_only else sorted(set(before) | set(after))
    differing = [label for label in labels if before.get(label) != after.get(label)]
    if not differing:
        return []
    prefix = _object_prefix(new, key)
    kind = after.get(KIND, before.get(KIND))

    def line(label):
        a, b = before.get(label, "(none)"), after.get(label, "(none)")
        if label == KIND:
            shown = (_short_name(a), _short_name(b))
            shown = (a, b) if shown[0] == shown[1] else shown  # (names a factory's function alike)
            return Difference(key, label, before.get(label), after.get(label), f"{prefix} {shown[0]} -> {shown[1]}")
        named = f" {_short_name(kind)}" if kind else ""
        return Difference(key, label, before.get(label), after.get(label), f"{prefix}{named} {label} {a} -> {b}")

    terms = [label for label in differing if label.startswith("term ")]
    values = [label for label in differing if label == "values"]
    numbers = [label for label in differing if label not in terms and label not in values and label != KIND]
    found = [line(KIND)] if KIND in differing else []
    if not found and numbers:
        return [line(label) for label in numbers]
    if not found and values:
        return [line(label) for label in values]
    if terms and (not found or _is_operator_entry(new, key)):
        found += [line(label) for label in terms[:_SHOWN_TERMS]]
        if len(terms) > _SHOWN_TERMS:
            more = len(terms) - _SHOWN_TERMS
            found.append(Difference(key, "term", None, None, f"{prefix} ... and {more} more terms"))
    return found


def _is_operator_entry(fp: dict, key: str) -> bool:
    """Whether ``key`` is an operator's decisive entry (its action)."""
    return str(fp.get(key, "")).startswith(CONTENT)


def _object_prefix(fp: dict, key: str) -> str:
    """``"model: RBM alpha"`` for ``model.alpha`` (the nearest enclosing
    object that has a kind names it), ``"n_samples:"`` for a top-level key."""
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        kind = fp.get(parent)
        if isinstance(kind, str) and re.fullmatch(r"[A-Za-z_][\w.]*", kind) and kind not in _CONTAINERS:
            return f"{parent}: {kind} {'.'.join(parts[i:])}"
    return f"{key}:"


def _what_a_hash_stands_for(old: dict, new: dict, key: str) -> str:
    """Which object a hash stands for, when nothing readable says more."""
    kind = readable(new, key).get(KIND)
    if not readable(old, key):  # a version 2 fingerprint: hashes only
        return f" ({_short_name(kind)}; the stored fingerprint, of an older nkserde, says no more)" if kind else ""
    return f" ({_short_name(kind)}: no readable difference)" if kind else " (no readable difference)"


def _short_name(kind: str) -> str:
    """``polynomial_schedule`` for ``polynomial_schedule.<locals>.schedule``
    (what optax's ``linear_schedule`` returns), ``my_schedule`` for
    ``main.<locals>.my_schedule``."""
    m = LOCAL_FUNCTION.match(kind)
    if not m:
        return kind
    return m.group("factory") if m.group("function") in _GENERIC_FUNCTIONS else m.group("function")


# ------------------------------------------------- version 2 in version 3's keys


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
