"""Two files compared entry by entry: what ``nkserde diff`` reports.

Both files are read whole and brought to today's names and schema versions
(:func:`nkserde.schema.migrate.current_state_dict`), so a file of an older
format or schema compares with a new one. A checkpoint written by
``Checkpoint`` compared with a file of a driver alone compares its driver.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import numpy as np

from ..types import nested
from ..checkpoint_files import content as checkpoint_file, directory
from ..errors import format_path
from ..loading.file_info import info, jsonable
from ..schema.migrate import current_state_dict
from ..types.placement import ProcessValues


def _read(path: Path, kept: list):
    if path.is_dir():
        path = directory.newest_verified(path)
    state = current_state_dict(path, kept=kept)
    if checkpoint_file.is_checkpoint(state) and state.get(checkpoint_file.HISTORY) is not None:
        # layout 2: the loggers' histories are in the directory's history
        # log; compare them whole, as a resume restores them (this imports
        # NetKet: diff is no header-only command)
        from ..checkpoint.persist import logger_histories as histories

        state = histories.resolve(path, state)
    return path, state


def flatten(state) -> dict:
    """``{"a/b/c": leaf}`` of a state dict: numpy arrays and scalars; a
    per-process value's processes as ``.../process-<r>/...``; an empty map
    or list as itself."""
    return {format_path(path): leaf for path, leaf in nested.leaves(state, _each_process)}


def _each_process(node):
    if isinstance(node, ProcessValues):
        return ((f"process-{r}", v) for r, v in enumerate(node.values))
    return nested.entries(node)


# Logged series that are not state: NetKet's driver logs time.perf_counter()
# at every step as "wallclock" (a logger's history, nkserde/netket/loggers.py),
# different in two bit-identical runs
WALL_CLOCK_SERIES = ("wallclock",)


def wall_clock_series(state) -> list[str]:
    """The paths of the logger history entries (``.../history/<i>``) of the
    wall-clock series in ``state``, in tree order."""
    found = []
    for path, node in nested.walk(state, _each_process):
        history = node.get("history") if isinstance(node, dict) else None
        for i, entry in enumerate(history if isinstance(history, list) else ()):
            logged = entry.get("path") if isinstance(entry, dict) else None
            if isinstance(logged, list) and logged and logged[-1] in WALL_CLOCK_SERIES:
                found.append(format_path(path + ("history", i)))
    return found


def excluded(path: str, patterns) -> bool:
    """``path`` matches a pattern (``fnmatch``: ``*`` crosses ``/``), or is
    under a path that does."""
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(path, p.rstrip("/") + "/*") for p in patterns)


def _is_array(x) -> bool:
    return isinstance(x, np.ndarray)


def _scalar_equal(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a and b != b:
        return True
    return a == b


def _numeric(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    return a.astype(np.float64)


def compare_arrays(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> dict | None:
    """None if equal within ``|a - b| <= atol + rtol * |b|`` elementwise
    (NaN equals NaN; with both tolerances 0, integers compare exactly),
    else ``{"differing", "size", "max_abs", "max_rel"}``: ``max_rel`` is
    ``max |a - b| / max(|a|, |b|)`` over the differing elements."""
    exact = atol == 0 and rtol == 0 and a.dtype.kind in "biu" and b.dtype.kind in "biu"
    if exact:
        differ = a != b
    else:
        x, y = _numeric(a), _numeric(b)
        with np.errstate(invalid="ignore", over="ignore"):
            differ = ~np.isclose(x, y, atol=atol, rtol=rtol, equal_nan=True)
    n = int(np.count_nonzero(differ))
    if n == 0:
        return None
    x, y = _numeric(a[differ]), _numeric(b[differ])
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        delta = np.abs(x - y)
        scale = np.maximum(np.abs(x), np.abs(y))
        rel = np.where(scale > 0, delta / np.where(scale > 0, scale, 1), 0.0)
    return {
        "differing": n,
        "size": int(a.size),
        "max_abs": _finite_or_text(np.nanmax(delta) if delta.size else 0),
        "max_rel": _finite_or_text(np.nanmax(rel) if rel.size else 0),
    }


def _finite_or_text(x):
    x = float(x)
    return x if np.isfinite(x) else str(x)


def diff(path_a, path_b, *, atol: float = 0.0, rtol: float = 0.0, exclude=(), wall_clock: bool = False) -> dict:
    """Compares two files (or checkpoint directories: their newest
    checkpoint that verifies). Returns::

        {"a": {"path", "info", "kept_versions"}, "b": {...}, "same": bool,
         "only_in_a": [path], "only_in_b": [path],
         "changed_layout": [{"path", "a": {"dtype", "shape"}, "b": {...}}],
         "changed_values": [{"path", "dtype", "shape", "differing", "size", "max_abs", "max_rel"}],
         "changed_scalars": [{"path", "a", "b"}],
         "excluded": [path], "exclude": [pattern]}

    ``kept_versions`` lists objects left at their stored schema version
    because their migration needs a template. Paths matching a pattern of
    ``exclude`` (or under one) are left out, and so are the wall-clock
    series of logger histories unless ``wall_clock``, and a checkpoint's
    reference to its history log (``history``; the histories themselves
    are read from the log and compared whole): they are listed in
    ``excluded``; ``exclude`` is every pattern applied."""
    sides = {}
    for name, path in (("a", Path(path_a)), ("b", Path(path_b))):
        kept: list = []
        file, state = _read(path, kept)
        sides[name] = (file, state, kept)
    (fa, sa, ka), (fb, sb, kb) = sides["a"], sides["b"]
    if checkpoint_file.is_checkpoint(sa) != checkpoint_file.is_checkpoint(sb):  # a checkpoint against a driver file
        sa = sa[checkpoint_file.DRIVER] if checkpoint_file.is_checkpoint(sa) else sa
        sb = sb[checkpoint_file.DRIVER] if checkpoint_file.is_checkpoint(sb) else sb
    patterns = list(exclude) + ([] if wall_clock else sorted(set(wall_clock_series(sa) + wall_clock_series(sb))))
    if checkpoint_file.is_checkpoint(sa) and checkpoint_file.is_checkpoint(sb):
        # where the history log ended and which log it is (a random id, a
        # chained checksum of its records): the log's bookkeeping, not state
        patterns.append(checkpoint_file.HISTORY)
    flat_a, flat_b = flatten(sa), flatten(sb)
    left_out = sorted({p for p in [*flat_a, *flat_b] if excluded(p, patterns)})
    flat_a = {p: v for p, v in flat_a.items() if p not in left_out}
    flat_b = {p: v for p, v in flat_b.items() if p not in left_out}
    result = {
        "a": {"path": str(fa), "info": info(fa), "kept_versions": [_kept_version_entry(k) for k in ka]},
        "b": {"path": str(fb), "info": info(fb), "kept_versions": [_kept_version_entry(k) for k in kb]},
        "only_in_a": [p for p in flat_a if p not in flat_b],
        "only_in_b": [p for p in flat_b if p not in flat_a],
        "changed_layout": [],
        "changed_values": [],
        "changed_scalars": [],
        "excluded": left_out,
        "exclude": patterns,
    }
    for p, a in flat_a.items():
        if p not in flat_b:
            continue
        b = flat_b[p]
        if _is_array(a) and _is_array(b):
            if a.dtype != b.dtype or a.shape != b.shape:
                result["changed_layout"].append(
                    {
                        "path": p,
                        "a": {"dtype": a.dtype.name, "shape": list(a.shape)},
                        "b": {"dtype": b.dtype.name, "shape": list(b.shape)},
                    }
                )
            if a.shape == b.shape:
                d = compare_arrays(a, b, atol, rtol)
                if d is not None:
                    result["changed_values"].append({"path": p, "dtype": a.dtype.name, "shape": list(a.shape), **d})
        elif _is_array(a) or _is_array(b):
            result["changed_layout"].append({"path": p, "a": _layout(a), "b": _layout(b)})
        elif not _scalar_equal(a, b) and not _close_scalars(a, b, atol, rtol):
            result["changed_scalars"].append({"path": p, "a": jsonable(a), "b": jsonable(b)})
    result["same"] = not any(
        result[k] for k in ("only_in_a", "only_in_b", "changed_layout", "changed_values", "changed_scalars")
    )
    return result


def _close_scalars(a, b, atol, rtol) -> bool:
    numbers = (int, float, complex)
    if (
        (atol or rtol)
        and isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return bool(np.isclose(a, b, atol=atol, rtol=rtol, equal_nan=True))
    return False


def _layout(x) -> dict:
    if _is_array(x):
        return {"dtype": x.dtype.name, "shape": list(x.shape)}
    return {"dtype": type(x).__name__, "shape": None}


def _kept_version_entry(k) -> dict:
    """An object left at its stored schema version, ``(path, type name,
    version)``, as ``kept_versions`` lists it."""
    path, name, version = k
    return {"path": format_path(path), "type": name, "schema_version": version}
