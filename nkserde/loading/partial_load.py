"""Partial loads: a part of a file (``at=``), renamed paths (``rename=``),
and the report of a non-strict load (``strict=False``).

Paths are ``/``-separated strings over the *stored* tree, the same paths
error messages name: ``state/parameters/Dense/kernel``; a list item is its
index (``layers/0``). Renames act on the file's paths before anything is
matched, and ``at`` is looked up after the renames.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping

from ..types import nested
from .._warnings import outside
from ..format import tree_codec
from ..errors import NkserdeError, NoSuchPathError, format_path


# what each kind of report entry means for the loaded object
KINDS = {
    "missing": "missing in the file",
    "unexpected": "in the file, not in the template",
    "differs": "shape, dtype or type differs",
}


class PartialLoadWarning(UserWarning):
    """The one warning of a non-strict load that kept entries at the
    template's value; ``.report`` is the :class:`LoadReport`."""

    def __init__(self, message: str, report: LoadReport):
        super().__init__(message)
        self.report = report


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry kept at the template's value (or, ``unexpected``, not used)."""

    path: str
    kind: str  # a key of KINDS
    detail: str = ""

    def __str__(self):
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.path}: {KINDS[self.kind]}{detail}"


@dataclasses.dataclass
class LoadReport:
    """What a non-strict load did not take from the file. Every entry the
    loaded object holds with the template's value is named here (``missing``
    and ``differs``), and every stored entry that was not used
    (``unexpected``). ``restored`` counts the arrays and scalars taken from
    the file."""

    file: str = ""
    at: str = ""
    strict: bool = False
    entries: list[Entry] = dataclasses.field(default_factory=list)
    restored: int = 0

    def add(self, path, kind: str, detail: str = "") -> None:
        self.entries.append(Entry(format_path(path), kind, detail))

    def _of(self, kind):
        return [e.path for e in self.entries if e.kind == kind]

    @property
    def missing(self) -> list[str]:
        return self._of("missing")

    @property
    def unexpected(self) -> list[str]:
        return self._of("unexpected")

    @property
    def differs(self) -> list[str]:
        return self._of("differs")

    def __bool__(self):
        return bool(self.entries)

    def __str__(self):
        where = f" at {self.at!r}" if self.at else ""
        head = f"nkserde: non-strict load of {self.file}{where}: {self.restored} values restored"
        if not self.entries:
            return head + ", nothing kept at the template's value"
        kept = sum(e.kind != "unexpected" for e in self.entries)
        unused = len(self.entries) - kept
        return f"{head}; {kept} kept at the template's value, {unused} in the file not used:\n  " + "\n  ".join(
            map(str, self.entries)
        )

    def warn(self, stacklevel: int | None = None) -> None:
        """The one warning of the load, if anything was left out; shown at
        ``stacklevel`` (as ``warnings.warn``'s), by default at the caller's
        line outside nkserde and NetKet."""
        if self.entries:
            warnings.warn(PartialLoadWarning(str(self), self), stacklevel=stacklevel or outside())


# --------------------------------------------------------------------------- paths


def split(path) -> tuple[str, ...]:
    if path is None or path == "":
        return ()
    if isinstance(path, (tuple, list)):
        return tuple(str(p) for p in path)
    if not isinstance(path, str):
        raise TypeError(f"a path is a '/'-separated string, got {type(path).__name__}")
    return tuple(p for p in path.strip("/").split("/") if p)


def children(node) -> list[str]:
    """The stored names one level below ``node`` (fields, keys, indices)."""
    if isinstance(node, dict):
        return [str(k) for k in tree_codec.fields_of(node)]
    if isinstance(node, list):
        return [str(i) for i in range(len(node))]
    return []


def select(state, at, file="") -> tuple[object, tuple]:
    """The stored value at path ``at`` of ``state`` and that path as a
    tuple; raises NoSuchPathError naming the entries that exist there."""
    parts = split(at)
    node = state
    for i, part in enumerate(parts):
        if isinstance(node, dict) and part in node and part not in tree_codec.MARKERS:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            here = format_path(parts[:i])
            raise NoSuchPathError(
                f"{file}: no entry {format_path(parts[: i + 1])!r} in the file; entries under "
                f"{here}: {children(node)[:20]}"
            )
    return node, parts


def _flatten(state) -> tuple[dict, set]:
    """``{path: leaf}`` of ``state`` (a leaf: an array, a scalar, an empty
    container, per-process values; paths of strings, as :func:`split`
    gives them) and the paths of its non-empty lists."""
    flat = dict(nested.leaves(state, _named_entries))
    lists = {path for path, node in nested.walk(state, _named_entries) if isinstance(node, list) and node}
    return flat, lists


def _named_entries(node):
    return ((str(key), child) for key, child in nested.entries(node))


def _rebuild(flat: dict, lists: set, file):
    root: dict = {}
    for path, value in flat.items():
        if not path:
            return value
        node = root
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise NkserdeError(f"{file}: renames put {format_path(path)} inside a value")
            node = nxt
        if path[-1] in node:
            raise NkserdeError(f"{file}: renames map two entries to {format_path(path)}")
        node[path[-1]] = value

    def as_lists(node, path):
        if not isinstance(node, dict):
            return node
        node = {k: as_lists(v, path + (k,)) for k, v in node.items()}
        if path in lists and all(k.isdigit() for k in node):
            return (
                [node[str(i)] for i in range(len(node))] if sorted(map(int, node)) == list(range(len(node))) else node
            )
        return node

    return as_lists(root, ())


def renamer(rename) -> Callable[[str], str]:
    """A function from file paths to template paths. A mapping renames
    prefixes: ``{"parameters/Dense_0": "parameters/Dense_1"}`` moves
    everything under ``Dense_0`` (the longest matching prefix wins)."""
    if callable(rename):
        return rename
    if not isinstance(rename, Mapping):
        raise TypeError(f"rename= takes a mapping or a function of paths, got {type(rename).__name__}")
    table = sorted(((split(k), split(v)) for k, v in rename.items()), key=lambda kv: -len(kv[0]))

    def fn(path: str) -> str:
        parts = split(path)
        for old, new in table:
            if parts[: len(old)] == old:
                return format_path(new + parts[len(old) :])
        return path

    return fn


def apply_renames(state, rename, file="") -> tuple[object, dict]:
    """``state`` with every stored path renamed; returns it and
    ``{old path: new path}`` of the paths that changed."""
    if rename is None:
        return state, {}
    fn = renamer(rename)
    flat, lists = _flatten(state)
    moved, out = {}, {}
    for path, value in flat.items():
        if path and path[-1] in tree_codec.MARKERS:  # markers move with their object
            parent = format_path(path[:-1]) if path[:-1] else ""
            new = split(fn(parent)) if parent else ()
            out[new + (path[-1],)] = value
            continue
        old = format_path(path)
        new = split(fn(old))
        if new != path:
            moved[old] = format_path(new)
        if new in out:
            raise NkserdeError(f"{file}: renames map two entries to {format_path(new)}")
        out[new] = value
    # a renamed container keeps being a list only where its path still is one
    return _rebuild(out, lists, file), moved
