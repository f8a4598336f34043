"""Logger histories beside the checkpoints: what a save appends, what a
resume reads back.

A RuntimeLog or JsonLog keeps every logged step in memory, and its
registration stores it whole (``{"history": [series], ...}``, see
nkserde/netket/loggers.py), so a checkpoint holding it would grow with the
run and a run would write bytes quadratic in its steps. A Checkpoint's
periodic saves store these loggers instead as

* a **record** appended to the directory's history log
  (nkserde/format/history_log.py, ``history-<n>.nkh``, named by
  nkserde/checkpoint_files/directory.py) holding, per logger and series, the rows logged
  since the previous checkpoint: ``{"step": int, "loggers": [{"logger":
  key, "reset": bool, "series": [{"path": [...], "start": row, "columns":
  {name: rows}}]}]}`` (``reset``: the rows before do not count, the logger's
  history was replaced rather than appended to);
* a **stub** in the checkpoint file in place of the logger
  (``checkpoint_file.LOGGER_HISTORY``): the logger's other fields and, per
  series in order, its metadata, row count, columns without rows (dtype and
  row shape) and last row; and the log's position after the record
  (``checkpoint_file.HISTORY``);
* after a resume, a **resume record** ``{"step": s, "loggers": []}`` (no
  logger: a reader replays nothing) appended just before the resumed run's
  first record: the run resumed the checkpoint of step ``s``. A log read
  whole is then the run's journal, every restart where it began
  (nkserde/checkpoint/persist/run_history.py reads it so).

A save costs the rows of one interval and the stubs, whatever the length
of the run. A resume reads every record up to the checkpoint's position
(through the logs it continues), checks each series' rows start where the
ones before ended, and rebuilds each logger's state as a layout-1
checkpoint holds it: every step once, whichever checkpoint it is. Records
after the position (a later checkpoint's, a record whose checkpoint a
crash prevented, a torn one) are not read.

Only process 0 appends (its loggers are the ones written); every process
reads. ``nkserde.save`` of a driver or a logger is not concerned: its file
holds the whole history.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np

from ...checkpoint_files import content as checkpoint_file, directory
from ..._log import say
from ...errors import CorruptFileError, NkserdeError, UnsupportedVersionError, in_file
from ...format import history_log
from ...format.tree_codec import TYPE, VERSION
from ...types.placement import Primary, primary

# the loggers whose "history" field is a list of time series (nkserde/netket/loggers.py)
HISTORY_TYPES = frozenset({"netket.logging.RuntimeLog", "netket.logging.JsonLog"})
STUB_VERSION = 1
_SERIES_KEYS = frozenset({"path", "columns", "main", "single", "keys"})
_STUB_SERIES_KEYS = frozenset({"path", "main", "single", "keys", "rows", "columns", "last"})


class _Series:
    """What the log holds of one series: its rows, its columns' layout and
    the bytes of its last row (a history that changed other than by
    appending rows is told by them)."""

    __slots__ = ("rows", "layout", "last")

    def __init__(self, columns: dict, rows: int):
        self.rows = rows
        self.layout = _layout(columns)
        self.last = _row_bytes(columns, rows)


def _layout(columns: dict) -> tuple:
    return tuple((name, a.dtype.str, a.shape[1:]) for name, a in columns.items())


def _row_bytes(columns: dict, rows: int) -> tuple | None:
    return tuple(np.ascontiguousarray(a[rows - 1]).tobytes() for a in columns.values()) if rows else None


def _series_of(logger) -> list | None:
    """The time series of a logger's state dict as ``[(path, series,
    rows)]``, or None if it is not a history logger of the expected layout
    (it is then stored whole, as in layout 1)."""
    if not isinstance(logger, dict) or logger.get(TYPE) not in HISTORY_TYPES:
        return None
    history = logger.get("history")
    if not isinstance(history, list):
        return None
    out, seen = [], set()
    for series in history:
        if not isinstance(series, dict) or set(series) != _SERIES_KEYS:
            return None
        path, columns = series["path"], series["columns"]
        if not isinstance(path, list) or not isinstance(columns, dict) or "iters" not in columns:
            return None
        if not all(isinstance(a, np.ndarray) and a.ndim >= 1 for a in columns.values()):
            return None  # a column of Python objects: whole
        rows = {len(a) for a in columns.values()}
        key = tuple(path)
        if len(rows) != 1 or key in seen:
            return None
        seen.add(key)
        out.append((key, series, rows.pop()))
    return out


def _continues(known: dict, series: list) -> bool:
    """Whether a logger's series only grew since the log recorded ``known``."""
    now = {path: (s["columns"], rows) for path, s, rows in series}
    for path, before in known.items():
        if path not in now:
            return False
        columns, rows = now[path]
        if rows < before.rows or _layout(columns) != before.layout:
            return False
        if before.rows and _row_bytes(columns, before.rows) != before.last:
            return False
    return True


def _stub(logger: dict, series: list) -> dict:
    return {
        TYPE: checkpoint_file.LOGGER_HISTORY,
        VERSION: STUB_VERSION,
        "logger": {k: v for k, v in logger.items() if k != "history"},
        "series": [
            {
                "path": list(path),
                "main": s["main"],
                "single": s["single"],
                "keys": list(s["keys"]),
                "rows": rows,
                "columns": {name: np.array(a[:0]) for name, a in s["columns"].items()},
                "last": {name: np.array(a[rows - 1]) for name, a in s["columns"].items()} if rows else None,
            }
            for path, s, rows in series
        ],
    }


class HistoryAppender:
    """Process 0's account of what the history logs of ``directory`` hold
    of this run's loggers: where they end (the position after the last
    record appended) and, per logger and series, the rows up to there."""

    def __init__(self, path):
        self.directory = Path(path)
        self.position: dict | None = None
        self._rows: dict = {}  # {logger key: {series path: _Series}}
        self._resumed_at: int | None = None  # the step resumed, until a resume record says so

    def resumed(self, state) -> None:
        """The run resumed the checkpoint ``state`` (as :func:`resolve`
        returns it): its records are what the log holds. A layout-1
        checkpoint holds no position: the first save starts a log with the
        whole histories."""
        held = state.get(checkpoint_file.HISTORY)
        self.position, self._rows = None, {}
        self._resumed_at = state.get(checkpoint_file.COMPLETED_STEPS)
        if not isinstance(held, dict):
            return
        self.position = {k: held[k] for k in history_log.POSITION_KEYS}
        for key in held["logged"]:
            series = _series_of(state[checkpoint_file.LOGGERS][key])
            self._rows[key] = {path: _Series(s["columns"], rows) for path, s, rows in series}

    def prepare(self, state, step: int):
        """``state`` (a checkpoint's state dict, as ``nkserde.state_dict``
        gives it) with its history loggers as stubs, and the write step of
        their new rows: a generator that appends them to the log (process 0)
        and returns the position the checkpoint records; None on the other
        processes (their loggers are not written). The rows are copied
        here: the run may go on logging."""
        import jax  # here: reading histories back (resolve) imports no JAX, for the command line

        state = dict(state)
        state[checkpoint_file.HISTORY] = primary(None)
        stored = state.get(checkpoint_file.LOGGERS)
        if jax.process_index() != 0:
            state[checkpoint_file.LOGGERS] = primary({})  # process 0's alone are stored
            return state, None
        loggers = stored.value if isinstance(stored, Primary) else stored
        out, entries, rows, logged = {}, [], {}, False
        for key, logger in (loggers or {}).items():
            series = _series_of(logger)
            if series is None:
                out[key] = logger
                continue
            logged = True
            known = self._rows.get(key)
            reset = known is None or not _continues(known, series)
            starts = {} if reset else {path: s.rows for path, s in known.items()}
            changed = [
                {
                    "path": list(path),
                    "start": starts.get(path, 0),
                    "columns": {name: a[starts.get(path, 0) : n] for name, a in s["columns"].items()},
                }
                for path, s, n in series
                if n > starts.get(path, 0)
            ]
            if reset or changed:
                entries.append({"logger": key, "reset": reset, "series": changed})
            out[key] = _stub(logger, series)
            rows[key] = {path: _Series(s["columns"], n) for path, s, n in series}
        state[checkpoint_file.LOGGERS] = primary(out) if isinstance(stored, Primary) else out
        if not logged:
            return state, _no_history_steps()
        record = history_log.encode_record({"step": step, "loggers": entries}) if entries else None
        resumed = None if self._resumed_at is None else history_log.encode_record(resume_record(self._resumed_at))
        return state, self._append_steps(resumed, record, rows)

    def _append_steps(self, resumed, record, rows):
        yield
        if resumed is not None:  # once: a failure after it leaves it in the log, said
            self.position = self._append(resumed)
            self._resumed_at = None
        if record is not None:
            self.position = self._append(record)
        self._rows = rows
        return self.position

    def _append(self, record: history_log.Record) -> dict:
        held = self.position
        if held is not None:
            path = directory.history_path(self.directory, held["file"])
            try:
                end = history_log.append(path, file_id=held["id"], end=held["end"], record=record)
            except history_log.Mismatch as why:
                say(f"{self.directory}: {path.name}: {why}; the logger histories continue in a new history log")
            else:
                return {**held, "end": end, "records": held["records"] + 1, "chain": record.chained(held["chain"])}
        path = directory.new_history_path(self.directory)
        file_id = history_log.new_id()
        meta = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(), "nkserde": _version()}
        end = history_log.create(path, file_id=file_id, parent=held, record=record, meta=meta)
        chain = record.chained(held["chain"] if held is not None else 0)
        return {"file": path.name, "id": file_id, "end": end, "records": 1, "chain": chain}


def resume_record(step: int) -> dict:
    """The record that marks a resume of the checkpoint of ``step``."""
    return {"step": step, "loggers": []}


def is_resume_record(record) -> bool:
    """Whether a record (as :func:`resume_record` makes them) marks a resume."""
    return isinstance(record, dict) and record.get("loggers") == [] and _is_count(record.get("step"))


def _no_history_steps():
    """The write steps of a checkpoint whose loggers keep no history: one
    step that appends nothing and records no position."""
    yield
    return None


def _version() -> str:
    from ... import __version__

    return __version__


# ------------------------------------------------------------------ reading


def _is_stub(node) -> bool:
    return isinstance(node, dict) and node.get(TYPE) == checkpoint_file.LOGGER_HISTORY


def resolve(path, state, records=None):
    """The checkpoint ``state`` read from ``path`` (``load_state_dict``)
    with every logger stub replaced by the logger's whole state, its
    history read back from the directory's history logs up to the
    checkpoint's position (or ``records``, as ``directory.read_history``
    returns them, already read); ``state[HISTORY]`` becomes that position
    with ``"logged"``, the keys of those loggers. Any other state is returned as
    it is. Raises CorruptFileError (naming the file, the logger and series,
    expected and found) if the logs do not hold what the checkpoint says."""
    if not checkpoint_file.is_checkpoint(state):
        return state
    path = Path(path)
    layout = state.get(checkpoint_file.LAYOUT, 1)
    if not isinstance(layout, int) or isinstance(layout, bool) or layout < 1:
        raise CorruptFileError(f"{path}: malformed checkpoint layout {layout!r:.80}")
    if layout > checkpoint_file.LAYOUT_VERSION:
        raise UnsupportedVersionError(
            f"{path}: checkpoint layout {layout} is newer than this nkserde supports "
            f"(layout {checkpoint_file.LAYOUT_VERSION}); upgrade nkserde"
        )
    loggers = state.get(checkpoint_file.LOGGERS)
    stubs = {k: v for k, v in loggers.items() if _is_stub(v)} if isinstance(loggers, dict) else {}
    if not stubs:
        return state
    position = state.get(checkpoint_file.HISTORY)
    if position is None:
        raise CorruptFileError(f"{path}: {', '.join(sorted(stubs))}: histories in a log, but no history log position")
    position = history_log.check_position(position, f"{path}: {checkpoint_file.HISTORY}")
    try:
        rows = _replay(directory.read_history(path.parent, position) if records is None else records)
        loggers = {**loggers, **{key: _rebuild(key, stub, rows.get(key, {})) for key, stub in stubs.items()}}
    except NkserdeError as exc:
        raise in_file(exc, path, unless=path.parent) from None  # the log's own errors name the log
    return {**state, checkpoint_file.LOGGERS: loggers, checkpoint_file.HISTORY: {**position, "logged": sorted(stubs)}}


def _where(key, series_path=None) -> str:
    return f"loggers/{key}" + (f", series {'/'.join(map(str, series_path))}" if series_path is not None else "")


def _is_path(p) -> bool:
    return isinstance(p, list) and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in p)


def _is_count(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _replay(records) -> dict:
    """``{logger key: {series path: [column chunks]}}`` from the records,
    ``(where, tree)`` oldest first: each series' rows must start where the
    ones before ended."""
    out: dict = {}
    for where, record in records:
        if (
            not isinstance(record, dict)
            or set(record) != {"step", "loggers"}
            or not isinstance(record["loggers"], list)
        ):
            raise CorruptFileError(f"{where}: not a record of logger histories")
        for entry in record["loggers"]:
            if (
                not isinstance(entry, dict)
                or set(entry) != {"logger", "reset", "series"}
                or not isinstance(entry["logger"], str)
                or not isinstance(entry["reset"], bool)
                or not isinstance(entry["series"], list)
            ):
                raise CorruptFileError(f"{where}: malformed logger entry {entry!r:.120}")
            key = entry["logger"]
            if entry["reset"] or key not in out:
                out[key] = {}
            logger = out[key]
            for series in entry["series"]:
                if (
                    not isinstance(series, dict)
                    or set(series) != {"path", "start", "columns"}
                    or not _is_path(series["path"])
                    or not _is_count(series["start"])
                    or not isinstance(series["columns"], dict)
                    or not series["columns"]
                ):
                    raise CorruptFileError(f"{where}: {_where(key)}: malformed series {series!r:.120}")
                columns, spath = series["columns"], tuple(series["path"])
                lengths = {len(a) if isinstance(a, np.ndarray) and a.ndim >= 1 else None for a in columns.values()}
                if len(lengths) != 1 or None in lengths:
                    raise CorruptFileError(f"{where}: {_where(key, spath)}: columns that are not rows of one length")
                held = logger.setdefault(spath, _Rows())
                if series["start"] != held.rows:
                    raise CorruptFileError(
                        f"{where}: {_where(key, spath)}: rows from {series['start']}, "
                        f"expected from {held.rows} (the rows before)"
                    )
                held.chunks.append(columns)
                held.rows += lengths.pop()
    return {key: {spath: held.chunks for spath, held in logger.items()} for key, logger in out.items()}


class _Rows:
    """The chunks of one series replayed so far, and their rows."""

    __slots__ = ("chunks", "rows")

    def __init__(self):
        self.chunks, self.rows = [], 0


def _rebuild(key, stub, chunks: dict) -> dict:
    """The state dict of the logger a stub stands for, its series'
    columns made of the replayed ``chunks``."""
    where = _where(key)
    if stub.get(VERSION) != STUB_VERSION:
        version = stub.get(VERSION)
        if _is_count(version) and version > STUB_VERSION:
            raise UnsupportedVersionError(
                f"{where}: {checkpoint_file.LOGGER_HISTORY} version {version} is newer than this nkserde supports "
                f"(version {STUB_VERSION}); upgrade nkserde"
            )
        raise CorruptFileError(f"{where}: malformed {checkpoint_file.LOGGER_HISTORY} version {version!r:.40}")
    if set(stub) != {TYPE, VERSION, "logger", "series"} or not isinstance(stub["series"], list):
        raise CorruptFileError(f"{where}: malformed {checkpoint_file.LOGGER_HISTORY}")
    logger = stub["logger"]
    if not isinstance(logger, dict) or not isinstance(logger.get(TYPE), str) or logger[TYPE] not in HISTORY_TYPES:
        raise CorruptFileError(f"{where}: the stub holds no logger of a history type")
    if "history" in logger:
        raise CorruptFileError(f"{where}: the stub holds a history of its own")
    history = []
    for s in stub["series"]:
        if (
            not isinstance(s, dict)
            or set(s) != _STUB_SERIES_KEYS
            or not _is_path(s["path"])
            or not (s["main"] is None or isinstance(s["main"], str))
            or not isinstance(s["single"], bool)
            or not (isinstance(s["keys"], list) and all(isinstance(k, str) for k in s["keys"]))
        ):
            raise CorruptFileError(f"{where}: malformed series {s!r:.120}")
        spath = tuple(s["path"])
        columns, rows, last = s["columns"], s["rows"], s["last"]
        if (
            not isinstance(columns, dict)
            or "iters" not in columns
            or not all(isinstance(a, np.ndarray) and a.ndim >= 1 and len(a) == 0 for a in columns.values())
            or not _is_count(rows)
            or not (last is None if rows == 0 else _is_row(last, columns))
        ):
            raise CorruptFileError(f"{_where(key, spath)}: malformed series columns, rows or last row")
        parts = chunks.get(spath, [])
        for part in parts:
            if list(part) != list(columns) or any(
                part[n].dtype != columns[n].dtype or part[n].shape[1:] != columns[n].shape[1:] for n in columns
            ):
                raise CorruptFileError(
                    f"{_where(key, spath)}: the history log holds columns {_column_layouts(part)}, "
                    f"the checkpoint {_column_layouts(columns)}"
                )
        found = sum(len(next(iter(p.values()))) for p in parts)
        if found != rows:
            raise CorruptFileError(
                f"{_where(key, spath)}: the history log holds {found} rows up to the checkpoint, it recorded {rows}"
            )
        whole = {n: np.concatenate([columns[n], *(p[n] for p in parts)]) if parts else columns[n] for n in columns}
        if rows and _row_bytes(whole, rows) != tuple(np.ascontiguousarray(last[n]).tobytes() for n in columns):
            raise CorruptFileError(f"{_where(key, spath)}: the last row of the history log is not the checkpoint's")
        history.append(
            {"path": list(spath), "columns": whole, "main": s["main"], "single": s["single"], "keys": s["keys"]}
        )
    return {**logger, "history": history}


def _is_row(last, columns: dict) -> bool:
    """Whether ``last`` is a row of ``columns`` (one value of each, its dtype and shape)."""
    return (
        isinstance(last, dict)
        and list(last) == list(columns)
        and all(
            isinstance(v, np.ndarray) and v.dtype == columns[n].dtype and v.shape == columns[n].shape[1:]
            for n, v in last.items()
        )
    )


def _column_layouts(columns: dict) -> str:
    """``{name: dtype[row shape]}`` of a series' columns, for errors."""
    return "{" + ", ".join(f"{n}: {a.dtype}{list(a.shape[1:])}" for n, a in columns.items()) + "}"
