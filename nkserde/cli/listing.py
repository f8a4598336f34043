"""What ``nkserde ls`` shows of a checkpoint directory: each Checkpoint
directory, its checkpoints, whether each verifies, which one a resume
loads, and what each says of its run (driver, steps, time, the last logged
loss).

Read from the header and the few arrays shown, without NetKet: a
checkpoint file holds the payload of nkserde.checkpoint_files.content; the loggers'
"history" follows the schema of nkserde/netket/loggers.py (in layout 2 a
stub of nkserde/checkpoint/persist/logger_histories.py holds its last row), TDVP's time
that of nkserde/netket/dynamics.py (a ``KahanSum``). Verifying a checkpoint
streams it whole, and the history log records it refers to, keeping
nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np

from ..loading import file_info
from ..checkpoint_files import content as checkpoint_file, directory as directory_layout
from .. import format as fileformat
from ..errors import CorruptFileError, NkserdeError
from ..format import foreign
from ..format.tree_codec import TYPE, array_ref as _ref

MAX_LISTED = 1000  # entries of a directory looked at for files NetKet wrote


def fingerprint_of(directory: Path) -> dict | None:
    """``fingerprint.json`` of a Checkpoint directory and a short digest of
    it: ``{"digest": 12 hex digits, "fields": {...}}``; None if absent,
    ``{"digest": None, "error": ...}`` if unreadable."""
    try:
        fields = directory_layout.read_fingerprint(directory)
    except (OSError, NkserdeError) as exc:
        return {"digest": None, "error": str(exc)}
    if fields is None:
        return None
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return {"digest": hashlib.sha256(canonical).hexdigest()[:12], "fields": fields}


def _number(node, arrays):
    """A scalar stored in the header or as a 0-d array (read), as a float."""
    if isinstance(node, dict) and "value" in node and TYPE in node:  # KahanSum
        return _number(node["value"], arrays)
    if (i := _ref(node)) is not None:
        return float(np.real(arrays[i]).reshape(-1)[0]) if i in arrays and arrays[i].size else None
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return float(node)
    return None


def _loss_series(loggers) -> tuple[str, dict] | None:
    """The first logged Monte Carlo statistic of the first logger with a
    history: the driver's loss (NetKet logs it first: ``Energy`` for VMC,
    ``Generator`` for TDVP, ``Infidelity``...). (name, columns): the whole
    columns, or the last row of each where the checkpoint keeps the history
    in the history log (a ``LOGGER_HISTORY`` stub, layout 2)."""
    if not isinstance(loggers, dict):
        return None
    for logger in loggers.values():
        stub = isinstance(logger, dict) and logger.get(TYPE) == checkpoint_file.LOGGER_HISTORY
        history = logger.get("series" if stub else "history") if isinstance(logger, dict) else None
        for series in history if isinstance(history, list) else ():
            columns = series.get("last" if stub else "columns") if isinstance(series, dict) else None
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
        "driver": driver.get(TYPE) if isinstance(driver.get(TYPE), str) else meta.get("root_type"),
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
    "resume", **summary}], "history_logs": [{"file", "size"}]}``.
    ``resume`` is the file a resume loads: the newest that verifies (None
    without ``verify``)."""
    out = []
    for run, path in directory_layout.checkpoint_directories(directory):
        checkpoints = []
        failures = {}  # file -> what directory.check raised for it
        for step in directory_layout.steps(path):
            file = directory_layout.step_path(path, step)
            entry = {
                "file": file.name,
                "step": step,
                "size": file.stat().st_size,
                "verifies": None,
                "problem": None,
                "resume": False,
            }
            if verify:
                try:
                    directory_layout.check(file)
                except (NkserdeError, OSError) as exc:
                    failures[file] = exc
                    entry["problem"] = " ".join(str(exc).split())
                entry["verifies"] = file not in failures
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
        picked = None
        if verify:

            def checked(file, failures=failures):  # directory.check's outcome, already known
                if file in failures:
                    raise failures[file]

            found = directory_layout.resume_file(path, checked)  # the rule a resume applies
            picked = next((c for c in checkpoints if found and c["file"] == found[0].name), None)
        if picked is not None:
            picked["resume"] = True
        logs = directory_layout.history_files(path)
        out.append(
            {
                "directory": str(path),
                "run": run,
                "fingerprint": fingerprint_of(path),
                "resume": picked["file"] if picked else None,
                "checkpoints": checkpoints,
                "history_logs": [{"file": log.name, "size": log.stat().st_size} for log in logs],
            }
        )
    return out


def netket_files(directory: Path) -> list[dict]:
    """The files NetKet wrote in ``directory`` (flax ``.mpack``, nqxpack
    files and directories; not in subdirectories), by name:
    ``[{"file", "kind", "size", "holds", "problem"}]``; each is read whole
    to say what it holds."""
    out = []
    for path in sorted(itertools.islice(Path(directory).iterdir(), MAX_LISTED)):
        try:
            kind = foreign.netket_kind(path) if path.is_file() or path.is_dir() else None
        except OSError:
            continue
        if kind is None:
            continue
        entry = {"file": path.name, "kind": kind, "size": None, "holds": None, "problem": None}
        try:
            entry["size"] = path.stat().st_size if path.is_file() else None
            entry["holds"] = file_info.netket_contents(path)[0]["holds"]
        except (NkserdeError, OSError) as exc:
            entry["problem"] = " ".join(str(exc).removeprefix(f"{path}: ").split())
        out.append(entry)
    return out
