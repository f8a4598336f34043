"""A checkpoint directory on disk: how checkpoints are named, listed and
found. Knows files only (no NetKet, no registry).

    ckpt/                      a Checkpoint's directory
      step-0000000015.nks      one checkpoint: 15 completed steps
      fingerprint.json         what defines the run
      .lock                    while a run uses the directory
    ckpt/                      a checkpointed(...) directory
      run-0/ run-1/ ...        one Checkpoint directory per run() call
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

import numpy as np

from . import checkpoint_file
from . import format as fileformat
from .format import bounded, limits
from .errors import CorruptFileError, NkserdeError, UnsupportedVersionError

STEP_FILE = re.compile(r"^step-(\d+)\.nks$")
RUN_DIRECTORY = re.compile(r"^run-(\d+)$")
FINGERPRINT_FILE = "fingerprint.json"  # what defines the run of a Checkpoint directory


def step_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step-{step:010d}.nks"


def steps(directory: Path) -> list[int]:
    """Steps that have a checkpoint file in ``directory``, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = (STEP_FILE.match(p.name) for p in directory.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def runs(directory: Path) -> list[Path]:
    """The ``run-<i>`` subdirectories of a ``checkpointed(...)`` directory,
    in order."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := RUN_DIRECTORY.match(p.name))]
    return [p for _, p in sorted(found)]


def verifies(path: Path) -> bool:
    try:
        fileformat.drain(fileformat.verify_steps(Path(path)))
        return True
    except (CorruptFileError, UnsupportedVersionError, OSError):
        return False


def latest(directory: Path, *, warn: bool = False) -> Path | None:
    """The newest checkpoint in ``directory`` that verifies, or None.
    ``warn``: say which damaged ones were skipped."""
    for step in reversed(steps(directory)):
        path = step_path(directory, step)
        if verifies(path):
            return path
        if warn:
            warnings.warn(f"nkserde: skipping damaged checkpoint {path}", stacklevel=2)
    return None


def newest_verified(directory: Path) -> Path:
    """The checkpoint file :func:`nkserde.load` reads for a directory: the
    newest that verifies in a Checkpoint directory, or in the only run of a
    ``checkpointed(...)`` directory. Raises NkserdeError when there is none
    or the choice is ambiguous."""
    directory = Path(directory)
    if not steps(directory):
        subdirectories = runs(directory)
        if len(subdirectories) > 1:
            names = ", ".join(str(p) for p in subdirectories)
            raise NkserdeError(
                f"{directory}: holds the checkpoints of {len(subdirectories)} run() calls; load one of {names}"
            )
        if subdirectories:
            directory = subdirectories[0]
    found = latest(directory, warn=True)
    if found is None:
        raise NkserdeError(f"{directory}: no checkpoint that verifies")
    return found


# Listing ----------------------------------------------------------------------
#
# What `nkserde ls` shows. A checkpoint file holds the payload of
# nkserde.checkpoint_file; the loggers' "history" follows the schema of
# nkserde/netket/loggers.py. Only the header and the few arrays shown are
# read here (verifying a checkpoint streams it whole, keeping nothing).


def checkpoint_directories(directory: Path) -> list[tuple[int | None, Path]]:
    """The Checkpoint directories in ``directory``: itself (run None) if it
    holds checkpoints or a fingerprint, else its ``run-<i>`` subdirectories
    (``checkpointed(...)``), as (i, path)."""
    directory = Path(directory)
    if steps(directory) or (directory / FINGERPRINT_FILE).is_file():
        return [(None, directory)]
    return [(int(RUN_DIRECTORY.match(p.name).group(1)), p) for p in runs(directory)]


def problem(path: Path) -> str | None:
    """None if the file verifies (every checksum, the structure), else what
    is wrong, in one line."""
    try:
        fileformat.drain(fileformat.verify_steps(Path(path)))
        return None
    except (NkserdeError, OSError) as exc:
        return " ".join(str(exc).split())


def fingerprint_of(directory: Path) -> dict | None:
    """``fingerprint.json`` of a Checkpoint directory and a short digest of
    it: ``{"digest": 12 hex digits, "fields": {...}}``; None if absent,
    ``{"digest": None, "error": ...}`` if unreadable."""
    path = Path(directory) / FINGERPRINT_FILE
    if not path.is_file():
        return None
    try:
        fields = bounded.read_json(path, limits.current().max_header_bytes, "run fingerprint")
        if not isinstance(fields, dict):
            raise CorruptFileError(f"{path}: the run fingerprint is not a JSON object")
    except (OSError, NkserdeError) as exc:
        return {"digest": None, "error": str(exc)}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return {"digest": hashlib.sha256(canonical).hexdigest()[:12], "fields": fields}


def _ref(node):
    """The array index of an encoded ``{"@array": i}``, else None."""
    if isinstance(node, dict) and len(node) == 1 and isinstance(node.get("@array"), int):
        return node["@array"]
    return None


def _number(node, arrays):
    """A scalar stored in the header or as a 0-d array (read), as a float."""
    if isinstance(node, dict) and "value" in node and "@type" in node:  # KahanSum
        return _number(node["value"], arrays)
    if (i := _ref(node)) is not None:
        return float(np.real(arrays[i]).reshape(-1)[0]) if i in arrays and arrays[i].size else None
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return float(node)
    return None


def _loss_series(loggers) -> tuple[str, dict] | None:
    """The first logged Monte Carlo statistic of the first logger with a
    history: the driver's loss (NetKet logs it first: ``Energy`` for VMC,
    ``Generator`` for TDVP, ``Infidelity``...). (name, columns)."""
    if not isinstance(loggers, dict):
        return None
    for logger in loggers.values():
        history = logger.get("history") if isinstance(logger, dict) else None
        for series in history if isinstance(history, list) else ():
            columns = series.get("columns") if isinstance(series, dict) else None
            if (
                isinstance(columns, dict)
                and _ref(columns.get("Mean")) is not None
                and _ref(columns.get("iters")) is not None
            ):
                where = series.get("path")
                name = "/".join(str(p) for p in where) if isinstance(where, list) and where else "loss"
                return name, columns
    return None


def summary(path: Path) -> dict:
    """What a checkpoint file says of its run, from its header and the few
    arrays needed: ``{"created", "process_count", "driver", "completed_steps",
    "time", "stopped", "target", "loss"}`` with ``loss`` ``{"name", "mean",
    "error", "at"}`` (the last logged value and the step or time it was
    logged at) or None. Raises NkserdeError/OSError if the file cannot be read."""
    path = Path(path)
    header = fileformat.read_header(path)
    try:
        return _summary(path, header)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        # a header that reads but whose content is not what a checkpoint holds
        raise CorruptFileError(f"{path}: unexpected checkpoint content ({type(exc).__name__}: {exc})") from None


def _summary(path: Path, header: dict) -> dict:
    tree, meta = header["tree"], header["meta"]
    tree = tree if isinstance(tree, dict) else {}
    driver = tree.get(checkpoint_file.DRIVER) if isinstance(tree.get(checkpoint_file.DRIVER), dict) else tree
    integrator = driver.get("integrator") if isinstance(driver.get("integrator"), dict) else {}
    series = _loss_series(tree.get(checkpoint_file.LOGGERS))
    wanted = [
        i
        for i in (
            _ref(integrator.get("t")),
            _ref((integrator.get("t") or {}).get("value") if isinstance(integrator.get("t"), dict) else None),
        )
        if i is not None
    ]
    if series is not None:
        wanted += [i for i in (_ref(series[1].get(k)) for k in ("iters", "Mean", "Sigma")) if i is not None]
    arrays = dict(fileformat.read_arrays(path, sorted(set(wanted))))
    loss = None
    if series is not None:
        name, columns = series
        iters, mean = arrays[_ref(columns["iters"])], arrays[_ref(columns["Mean"])]
        sigma = arrays.get(_ref(columns.get("Sigma")))
        if mean.size and iters.size:
            loss = {
                "name": name,
                "mean": float(np.real(mean.reshape(-1)[-1])),
                "error": float(np.real(sigma.reshape(-1)[-1])) if sigma is not None and sigma.size else None,
                "at": float(iters.reshape(-1)[-1]),
            }
    completed = tree.get(checkpoint_file.COMPLETED_STEPS)
    return {
        "created": meta.get("created"),
        "process_count": meta.get("process_count"),
        "driver": driver.get("@type") if isinstance(driver.get("@type"), str) else meta.get("root_type"),
        "completed_steps": completed if isinstance(completed, int) and not isinstance(completed, bool) else None,
        "time": _number(integrator.get("t"), arrays),
        "stopped": tree.get(checkpoint_file.STOPPED) if isinstance(tree.get(checkpoint_file.STOPPED), bool) else None,
        "target": _number(tree.get(checkpoint_file.TARGET), arrays),
        "loss": loss,
    }


def listing(directory: Path, *, verify: bool = True) -> list[dict]:
    """Every Checkpoint directory in ``directory`` (itself, or each
    ``run-<i>`` of a ``checkpointed(...)`` directory) with its checkpoints,
    oldest first: ``{"directory", "run", "fingerprint", "resume",
    "checkpoints": [{"file", "step", "size", "verifies", "problem",
    "resume", **summary}]}``. ``resume`` is the file a resume loads: the
    newest that verifies (None without ``verify``)."""
    out = []
    for run, path in checkpoint_directories(directory):
        checkpoints = []
        for step in steps(path):
            file = step_path(path, step)
            entry = {
                "file": file.name,
                "step": step,
                "size": file.stat().st_size,
                "verifies": None,
                "problem": None,
                "resume": False,
            }
            if verify:
                entry["problem"] = problem(file)
                entry["verifies"] = entry["problem"] is None
            try:
                entry.update(summary(file))
            except (NkserdeError, OSError) as exc:
                entry["problem"] = entry["problem"] or " ".join(str(exc).split())
                entry.update(
                    dict.fromkeys(
                        ("created", "process_count", "driver", "completed_steps", "time", "stopped", "target", "loss")
                    )
                )
            checkpoints.append(entry)
        picked = next((c for c in reversed(checkpoints) if c["verifies"]), None)
        if picked is not None:
            picked["resume"] = True
        out.append(
            {
                "directory": str(path),
                "run": run,
                "fingerprint": fingerprint_of(path),
                "resume": picked["file"] if picked else None,
                "checkpoints": checkpoints,
            }
        )
    return out
