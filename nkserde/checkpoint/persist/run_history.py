"""A run's logged history as its checkpoint directory holds it, across
every restart: :func:`history` (``nkserde.history``), which ``nkserde
history`` and ``nkserde plot`` print and draw.

Read from files alone, without JAX or NetKet (on a login node, beside a run
that is writing): the newest checkpoint that reads, skipped for the one
before it if it is damaged or retired meanwhile; its loggers' histories as
a resume restores them (:func:`logger_histories.resolve`, the history logs
up to its position: whole records only, never the lock); and those records
read as the run's journal. A resume record says where a restart began; a
log that continues its parent from before the parent's end says that the
records after that point were logged, then run again after a restart from
the earlier checkpoint (read to their end or to a torn one: no run appends
to a log that another continues).

Layout-1 checkpoints (nkserde before history logs: each holds every
history whole) and files of ``nkserde.save`` holding loggers give their
histories but say nothing of restarts; logs of nkserde before resume
records show the restarts that ran steps again, not the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ... import format as fileformat
from ...checkpoint_files import content as checkpoint_file, directory
from ...errors import NkserdeError
from ...format import history_log
from ...format.tree_codec import TYPE
from . import logger_histories

ITERS = "iters"  # NetKet's name of the column that says at which step (or time) a row was logged


@dataclasses.dataclass(frozen=True)
class Restart:
    """A restart of the run, as its history log records it.

    ``step``: the completed steps of the checkpoint the run resumed (None:
    the log does not say).
    ``at``: where the rows logged after the restart begin, the ``iters`` of
    the first (the step, or TDVP's time; None while there is none).
    ``redone``: ``(first, last)`` ``iters`` of rows the run had logged after
    that checkpoint and logged again after the restart, as far as the logs
    show (records that a later checkpoint had referred to); None when they
    show none: what a killed run did after its last checkpoint is in no
    file (it is done again, from ``step``; an interrupted run that saved as
    it stopped did nothing after it)."""

    step: int | None
    at: float | None
    redone: tuple | None


@dataclasses.dataclass(frozen=True)
class _Quantity:
    columns: dict  # {"iters": ..., field: ...} as logged
    path: tuple  # the series' place in the logged tree, as the records name it
    main: str | None  # the field NetKet's History takes as the value: "Mean", "value"
    single: bool  # logged as one number (a column "value" alone)
    logger: str


class RunHistory(Mapping):
    """Every quantity a run's loggers logged, at every step, across its
    restarts: ``h["Energy"]`` is ``{"iters": int64[n], "Mean": float64[n]
    (complex128 for a complex loss), "Sigma": float64[n], ...}``, what
    ``RuntimeLog.data["Energy"]`` holds at the end of the run's last
    ``run()`` (numpy arrays with the logged dtypes, bit for bit; each
    quantity with its own ``iters``, the steps, or TDVP's times, it was
    logged at); the names are the places in the logged tree, ``/``-joined
    (``"obs/Sx"``).

    ``table()`` is the same as one table: a row per step, for pandas
    (``pandas.DataFrame(h.table())``), polars or a CSV; ``restarts`` the
    :class:`Restart` s in order, as the history log records them
    (``restarts_recorded`` False: the histories were whole in the file, a
    checkpoint of nkserde before history logs or a file of
    ``nkserde.save``, and nothing says whether the run restarted);
    ``checkpoint`` the file read (the newest that reads), ``directory`` its
    Checkpoint directory and ``run`` its ``run()`` call in a
    ``checkpointed(...)`` directory (else None).

    Plain numpy and dicts, so that nothing beyond nkserde's own
    dependencies is needed to read it, and every plotting or table library
    takes it as it is. The quantities of several loggers (a RuntimeLog and
    a JsonLog log the same) are each listed once; a different one of the
    same name is named ``"<logger key>/<name>"``."""

    def __init__(self, quantities: dict, restarts=None, checkpoint=None, directory=None, run=None):
        self._quantities = dict(quantities)
        self.restarts: tuple = tuple(restarts or ())
        self.restarts_recorded: bool = restarts is not None
        self.checkpoint: Path | None = checkpoint
        self.directory: Path | None = directory
        self.run: int | None = run

    def __getitem__(self, name: str) -> dict:
        return self._quantities[name].columns

    def __iter__(self):
        return iter(self._quantities)

    def __len__(self) -> int:
        return len(self._quantities)

    def __repr__(self) -> str:
        rows = max((len(q.columns[ITERS]) for q in self._quantities.values()), default=0)
        return (
            f"RunHistory({self.checkpoint or self.directory}: {', '.join(self) or 'nothing logged'}; "
            f"{rows} rows, {len(self.restarts)} restarts)"
        )

    def placed(self, directory: Path, run) -> RunHistory:
        """The same history, read from a checkpoint of ``directory`` (of
        ``run()`` call ``run``, or None)."""
        restarts = self.restarts if self.restarts_recorded else None
        return RunHistory(self._quantities, restarts, checkpoint=self.checkpoint, directory=directory, run=run)

    def main(self, name: str) -> str | None:
        """The field NetKet takes as the quantity's value (``"Mean"`` of a
        Monte Carlo statistic, ``"value"`` of a number), or None."""
        return self._quantities[name].main

    def column_names(self, name: str) -> list[str]:
        """The columns of ``name`` in :meth:`table`: ``name`` itself for a
        quantity logged as one number, else ``name/field`` per field."""
        q = self._quantities[name]
        if q.single:
            return [name]
        return [f"{name}/{field}" for field in q.columns if field != ITERS]

    def rows(self, names=None) -> tuple:
        """How the quantities ``names`` (all by default) make one table:
        ``(iters, {name: rows})``, every value of ``iters`` any of them was
        logged at, in order (a value logged twice by one quantity: twice),
        and for each quantity the row of each of its values."""
        names = list(self) if names is None else list(names)
        keys = sorted({key for name in names for key in _row_keys(self[name][ITERS])})
        index = {key: i for i, key in enumerate(keys)}
        rows = {name: np.array([index[k] for k in _row_keys(self[name][ITERS])], dtype=np.int64) for name in names}
        dtype = np.result_type(*[self[name][ITERS].dtype for name in names]) if names else np.int64
        return np.array([k[0] for k in keys], dtype=dtype), rows

    def table(self, names=None) -> dict:
        """The quantities ``names`` (all by default) as one table: ``{"iters":
        array[n], column: array[n], ...}`` (columns as :meth:`column_names`
        names them), a row per value of ``iters`` any of them was logged at,
        in order. A row where a quantity was not logged holds NaN (its
        column then float or complex; a column of arrays, one object per
        row, holds None); every other value is the one logged."""
        iters, rows = self.rows(names)
        out = {ITERS: iters}
        for name, at in rows.items():
            fields = [f for f in self[name] if f != ITERS]
            for column, field in zip(self.column_names(name), fields):
                out[column] = _spread(self[name][field], at, len(iters))
        return out


def _row_keys(iters) -> list[tuple]:
    """(value, how many times it came before): a step logged twice is two rows."""
    seen: dict = {}
    keys = []
    for value in np.asarray(iters).tolist():
        keys.append((value, seen.get(value, 0)))
        seen[value] = seen.get(value, 0) + 1
    return keys


def _spread(values: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """``values`` at ``rows`` of a column of ``n`` rows, the others missing."""
    if values.ndim > 1:
        out = np.full(n, None, dtype=object)
        for row, value in zip(rows.tolist(), values):
            out[row] = value
        return out
    if len(rows) == n:
        return values[np.argsort(rows)] if np.any(np.diff(rows) < 0) else values
    kind = values.dtype.kind
    dtype = values.dtype if kind in "fc" else np.float64 if kind in "biu" else object
    out = np.full(n, None if dtype is object else np.nan, dtype=dtype)
    out[rows] = values
    return out


# ------------------------------------------------------------------ reading


def history(path) -> RunHistory:
    """What a Checkpoint's loggers (RuntimeLog, JsonLog) logged over the
    whole run, across every restart, as a :class:`RunHistory`.

    ``path``: a Checkpoint directory (its newest checkpoint that reads:
    where a resume would continue), a ``checkpointed(...)`` directory of
    one ``run()`` call, or one checkpoint file (the history up to it); also
    a file of ``nkserde.save`` holding loggers (no restarts then). Reads
    the checkpoint's header and loggers and the history logs up to its
    position, each checksum checked, without JAX or NetKet and without
    taking the directory's lock: safe beside the run writing there.
    Raises NkserdeError (naming the path) if there is nothing to read."""
    found = histories(path)
    if len(found) > 1:
        names = ", ".join(str(h.directory) for h in found)
        raise NkserdeError(f"{path}: holds the checkpoints of {len(found)} run() calls; give one of {names}")
    return found[0]


def histories(path) -> list[RunHistory]:
    """:func:`history` of each run in ``path``: one per ``run-<i>/`` of a
    ``checkpointed(...)`` directory, else one."""
    path = Path(path)
    if not path.is_dir():
        if not path.exists():
            raise NkserdeError(f"{path}: no such file or directory")
        return [_of_file(path)]
    runs = directory.checkpoint_directories(path)
    if not runs:
        raise NkserdeError(
            f"{path}: not a checkpoint directory (no step-*.nks, fingerprint.json or run-*/); "
            "nkserde.Checkpoint(DIR) writes checkpoint directories"
        )
    return [_of_directory(d, run) for run, d in runs]


def _of_directory(path: Path, run) -> RunHistory:
    if not directory.steps(path):
        raise NkserdeError(f"{path}: no checkpoint yet: the run has logged nothing a checkpoint holds")
    found = directory.resume_file(path, _read, warn=True)  # the rule a resume applies, a read in place of check
    if found is None:
        raise NkserdeError(f"{path}: no checkpoint reads (nkserde ls {path} says why)")
    return found[1].placed(path, run)


def _of_file(path: Path) -> RunHistory:
    return _read(path).placed(path.parent, None)


def _read(path: Path) -> RunHistory:
    """The history a checkpoint file (or a file holding loggers) holds.
    Raises NkserdeError or OSError if it does not read."""
    with fileformat.LazyFile(path) as f:
        tree = f.tree
        if checkpoint_file.is_checkpoint(tree):
            # the driver's arrays are not read: the loggers and the position only
            state = {k: fileformat.materialize(v) if k == checkpoint_file.LOGGERS else v for k, v in tree.items()}
        else:
            state = {checkpoint_file.LOGGERS: {k: fileformat.materialize(v) for k, v in _loggers_in(tree)}}
    position = checkpoint_file.history_position(state)
    records = None
    if isinstance(position, dict):
        position = history_log.check_position(position, f"{path}: {checkpoint_file.HISTORY}")
        records = directory.read_history(path.parent, position)
        state = logger_histories.resolve(path, state, records)
    quantities = _quantities(state.get(checkpoint_file.LOGGERS))
    restarts = _restarts(path.parent, position, records, quantities) if records is not None else None
    return RunHistory(quantities, restarts, checkpoint=path)


def _loggers_in(tree, where=()):
    """(key, state) of every logger holding a whole history in a tree."""
    if isinstance(tree, dict):
        if _whole_history(tree):
            yield "/".join(map(str, where)) or "logger", tree
            return
        for k, v in tree.items():
            yield from _loggers_in(v, (*where, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _loggers_in(v, (*where, i))


def _whole_history(logger) -> bool:
    return isinstance(logger, dict) and TYPE in logger and isinstance(logger.get("history"), list)


def _quantities(loggers) -> dict:
    """``{name: _Quantity}`` of the loggers' series, each name once. A
    series not of the layout of nkserde/netket/loggers.py (columns of rows
    of one length, ``iters`` numbers) is left out: the file is read as
    untrusted, and what is shown is what NetKet logged."""
    out: dict = {}
    for key, logger in (loggers or {}).items() if isinstance(loggers, dict) else ():
        if not _whole_history(logger):
            continue
        for series in logger["history"]:
            columns = series.get("columns") if isinstance(series, dict) else None
            path = series.get("path") if isinstance(series, dict) else None
            if not _columns(columns) or not isinstance(path, list):
                continue
            path = tuple(p for p in path if isinstance(p, (str, int)))
            name = "/".join(str(p) for p in path) or "value"
            main = series.get("main") if isinstance(series.get("main"), str) and series["main"] in columns else None
            q = _Quantity({ITERS: columns[ITERS], **columns}, path, main, series.get("single") is True, str(key))
            if name in out:
                if _same(out[name].columns, q.columns):
                    continue
                name = f"{key}/{name}"
            out[name] = q
    return out


def _columns(columns) -> bool:
    """Whether a series' columns are rows of one length, at numbers (``iters``)."""
    return (
        isinstance(columns, dict)
        and all(isinstance(k, str) and isinstance(a, np.ndarray) and a.ndim >= 1 for k, a in columns.items())
        and isinstance(columns.get(ITERS), np.ndarray)
        and columns[ITERS].ndim == 1
        and columns[ITERS].dtype.kind in "iuf"
        and len({len(a) for a in columns.values()}) == 1
    )


def _same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes() for k in a
    )


# ------------------------------------------------------------------ restarts


def _restarts(where: Path, position: dict, records: list, quantities: dict) -> list[Restart]:
    """The restarts the records up to ``position`` record (resume records;
    logs that continue their parent before its end), oldest first."""
    lineage = directory.history_lineage(where, position)
    first_of_log = {}  # the index in ``records`` of each continuing log's first record -> the log it continues
    start = 0
    for k, (_, part, _) in enumerate(lineage):
        if k:
            first_of_log[start] = lineage[k - 1]
        start += part["records"]
    found = []
    rows: dict = {}  # (logger key, series path) -> rows logged up to here
    for i, (_, record) in enumerate(records):
        branch = first_of_log.get(i)
        redone = _redone(*branch[:2]) if branch is not None else None
        if logger_histories.is_resume_record(record):
            found.append((record["step"], dict(rows), redone))
        elif redone is not None and i:  # a log of nkserde before resume records: the restart ran steps again
            step = records[i - 1][1]["step"]  # of the checkpoint resumed, whose record is the last it continues
            found.append((step if isinstance(step, int) and not isinstance(step, bool) else None, dict(rows), redone))
        for entry in record["loggers"]:
            if entry["reset"]:
                rows = {k: n for k, n in rows.items() if k[0] != entry["logger"]}
            for series in entry["series"]:
                n = len(next(iter(series["columns"].values())))
                rows[entry["logger"], tuple(series["path"])] = series["start"] + n
    return [Restart(step, _first_after(before, quantities, step), redone) for step, before, redone in found]


def _redone(log: Path, continued: dict) -> tuple | None:
    """(first, last) ``iters`` of the rows in the records of ``log`` after
    the position another log continues, or None."""
    iters = [
        series["columns"][ITERS]
        for record in history_log.read_tail(log, continued)  # checked records, trees of any shape
        if isinstance(record, dict) and isinstance(record.get("loggers"), list)
        for entry in record["loggers"]
        if isinstance(entry, dict) and isinstance(entry.get("series"), list)
        for series in entry["series"]
        if isinstance(series, dict) and _columns(series.get("columns"))
    ]
    iters = [a for a in iters if a.size]
    if not iters:
        return None
    values = np.concatenate([a.reshape(-1) for a in iters])
    return values.min().item(), values.max().item()


def _first_after(rows_before: dict, quantities: dict, step):
    """The ``iters`` of the first row logged after a restart that found
    ``rows_before`` rows per (logger, series), or None. A restart before
    any record (from a checkpoint holding its histories whole, whose rows
    the log then starts with) is placed by its step, where the rows are
    logged at steps."""
    firsts = []
    for q in quantities.values():
        iters = q.columns[ITERS]
        if rows_before or not step:
            n = rows_before.get((q.logger, q.path), 0)
        elif iters.dtype.kind in "iu":
            n = int(np.searchsorted(iters, step))
        else:
            continue
        if n < len(iters):
            firsts.append(iters[n].item())
    return min(firsts) if firsts else None
