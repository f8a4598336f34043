"""Loggers of ``netket.logging``: their in-memory history.

A run resumed from a checkpoint restores each logger's history to the
checkpoint step, so steps logged after it (and before a crash) are dropped,
not duplicated. ``JsonLog`` rewrites its whole ``.log`` file from that
history whenever it flushes, so after a resume the file holds every step
exactly once.

Schema of ``history``: a list of entries, one per logged time series,
``{"path": [str | int, ...], "columns": {"iters": int[n], name: values[n, ...]},
"main": str | None, "single": bool, "keys": [str]}`` where ``path`` is the
place of the series in the logged tree (ints index lists).
"""

from __future__ import annotations

import copy
import os
import weakref

import netket as nk
from netket.utils.history import History, HistoryDict

from ..types import registry
from ._common import find


def _flatten(tree, path=()) -> list[dict]:
    if isinstance(tree, HistoryDict):
        tree = tree._data
    if isinstance(tree, History):
        return [
            {
                "path": list(path),
                "columns": dict(tree._value_dict),
                "main": tree._value_name,
                "single": bool(tree._single_value),
                "keys": list(tree._keys),
            }
        ]
    items = tree.items() if isinstance(tree, dict) else enumerate(tree or ())
    return [entry for key, value in items for entry in _flatten(value, path + (key,))]


def _history(entry) -> History:
    history = History.__new__(History)
    history._value_dict = dict(entry["columns"])
    history._value_name = entry["main"]
    history._single_value = entry["single"]
    history._keys = list(entry["keys"])
    return history


def _unflatten(entries) -> HistoryDict:
    root: dict = {}
    for entry in entries:
        *parents, last = entry["path"]
        node = root
        for key, following in zip(parents, entry["path"][1:]):
            if isinstance(node, list):
                while len(node) <= key:
                    node.append(None)
            if isinstance(node, dict) and key not in node or isinstance(node, list) and node[key] is None:
                node[key] = [] if isinstance(following, int) else {}
            node = node[key]
        if isinstance(node, list):
            while len(node) <= last:
                node.append(None)
        node[last] = _history(entry)
    return HistoryDict(root)


def _runtime_to_state(log) -> dict:
    return {"history": _flatten(log._data), "last_step": log._old_step}


def _runtime_from_state(template, fields):
    new = copy.copy(template)
    new._data = _unflatten(fields["history"])
    new._old_step = fields["last_step"]
    return new


registry.register(
    nk.logging.RuntimeLog,
    name="netket.logging.RuntimeLog",
    version=1,
    to_state=_runtime_to_state,
    from_state=_runtime_from_state,
    subclasses=True,
    fields=("history", "last_step"),
    free_fields=("history", "last_step"),
    doc=(
        "`history`: list of time series `{path: [str or int], columns: {iters: int[n], name: "
        "values[n, ...]}, main: str or None, single: bool, keys: [str]}`, where `path` places the "
        "series in the logged tree; `last_step`: int"
    ),
)

registry.register(
    nk.logging.JsonLog,
    name="netket.logging.JsonLog",
    version=1,
    to_state=_runtime_to_state,
    from_state=_runtime_from_state,
    fields=("history", "last_step"),
    free_fields=("history", "last_step"),
    doc="as RuntimeLog (its `.log` file is rewritten from the history on flush)",
)


# StateLog ---------------------------------------------------------------------


def _state_log_to_state(log) -> dict:
    return {"last_step": log._old_step, "steps_not_saved": log._steps_notsaved, "next_file": log._file_step}


def _state_log_from_state(template, fields):
    new = copy.copy(template)
    new._old_step = fields["last_step"]
    new._steps_notsaved = fields["steps_not_saved"]
    new._file_step = fields["next_file"]
    if new._tar:
        # reopen the archive for appending: the states saved so far are kept
        # (states written after the checkpoint and before a crash stay too)
        new._file_mode = "append"
        new._tar_file, new._init = None, False
    else:
        # the folder is already set up: skip the first-save check, which in
        # "write" mode would delete the states saved before the checkpoint
        new._init = True
    return new


registry.register(
    nk.logging.StateLog,
    name="netket.logging.StateLog",
    version=1,
    to_state=_state_log_to_state,
    from_state=_state_log_from_state,
    fields=("last_step", "steps_not_saved", "next_file"),
    free_fields=("last_step",),
    doc=(
        "`last_step`; `steps_not_saved`: int; `next_file`: int, number of the next state file (the "
        "files stay on disk; a resumed run overwrites those written after the checkpoint with the "
        "same states, in folder mode)"
    ),
)


# HDF5Log and TensorBoardLog ------------------------------------------------------


def _hdf5_to_state(log) -> dict:
    rows = {}

    def count(f):
        f.visititems(
            lambda name, obj: (
                rows.__setitem__(name, obj.shape[0] if obj.shape else 0) if isinstance(obj, h5py.Dataset) else None
            )
        )

    if log._writer is not None:
        import h5py

        log._writer.flush()
        count(log._writer)
    elif os.path.exists(log._file_name):  # closed (after its run): the file as it is
        import h5py

        with h5py.File(log._file_name, "r") as f:
            count(f)
    return {"rows": rows}


def _hdf5_from_state(template, fields):
    new = copy.copy(template)
    # The file already holds the data up to the checkpoint (and maybe more):
    # append to it rather than overwrite it, after resume_files has cut every
    # dataset back to these row counts.
    new._file_mode = "a"
    new._writer = None
    _ROWS_AT_CHECKPOINT[id(new)] = dict(fields["rows"])
    weakref.finalize(new, _ROWS_AT_CHECKPOINT.pop, id(new), None)
    return new


# A load never touches files (it may be an inspection): the rows an HDF5
# log's datasets had at the checkpoint wait here, by loaded object, until a
# run resumes with it (resume_files).
_ROWS_AT_CHECKPOINT: dict[int, dict] = {}


def resume_files(live, loaded) -> None:
    """A run resumes with the logger ``loaded`` from a checkpoint (its state
    already copied into ``live``, the script's logger): make ``live``'s
    files end at the checkpoint. JsonLog rewrites its ``.log`` from the
    restored history; HDF5Log cuts its datasets back to the checkpoint's
    rows and removes those first logged after it. Other loggers need
    nothing (TensorBoardLog purges on its own)."""
    if isinstance(live, nk.logging.JsonLog):
        live._flush_log()
    rows = _ROWS_AT_CHECKPOINT.pop(id(loaded), None)
    if rows is not None and os.path.exists(live._file_name):
        import h5py

        with h5py.File(live._file_name, "a") as f:
            datasets = []
            f.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
            for name in datasets:
                if name not in rows:
                    del f[name]  # first logged after the checkpoint
                elif f[name].shape and f[name].shape[0] > rows[name]:
                    f[name].resize(rows[name], axis=0)


registry.register(
    # netket.experimental.logging before NetKet 3.22
    find("netket.logging.HDF5Log", "netket.experimental.logging.HDF5Log"),
    name="netket.logging.HDF5Log",
    version=1,
    to_state=_hdf5_to_state,
    from_state=_hdf5_from_state,
    free_fields=("rows",),
    fields=("rows",),
    doc=(
        "`rows`: {dataset path: number of rows at the checkpoint}. On resume the log appends to its"
        " file (whatever its mode) after every dataset was cut back to these rows and datasets "
        "first logged after the checkpoint were removed"
    ),
)


def _tensorboard_to_state(log) -> dict:
    return {"last_step": log._old_step}


def _tensorboard_from_state(template, fields):
    new = copy.copy(template)
    step = fields["last_step"]
    if isinstance(step, int) and getattr(template, "_writer", None) is None:
        # TensorBoard hides the events of steps >= purge_step written before
        new._init_kwargs = {**template._init_kwargs, "purge_step": step + 1}
    new._old_step = step
    return new


registry.register(
    nk.logging.TensorBoardLog,
    name="netket.logging.TensorBoardLog",
    version=1,
    to_state=_tensorboard_to_state,
    from_state=_tensorboard_from_state,
    fields=("last_step",),
    free_fields=("last_step",),
    doc=(
        "`last_step`: the last logged step; the resumed writer is created with `purge_step = "
        "last_step + 1`, so TensorBoard hides the events of the interrupted run after the "
        "checkpoint"
    ),
)


# MLFlowLog and WandbLog --------------------------------------------------------


def _tracking_to_state(log) -> dict:
    run = getattr(log, "_run", None)
    run_id = run.info.run_id if hasattr(run, "info") else getattr(run, "id", None)
    return {
        "run_id": run_id or log._run_id,
        "last_step": log._old_step,
        "steps_since_last_params": log._steps_since_last_params,
    }


def _tracking_from_state(template, fields):
    new = copy.copy(template)
    if getattr(template, "_run", None) is None and fields["run_id"] is not None:
        new._run_id = fields["run_id"]  # the resumed run logs into the same tracking run
    new._old_step = fields["last_step"]
    new._steps_since_last_params = fields["steps_since_last_params"]
    return new


# MLFlowLog exists from NetKet 3.22, WandbLog from 3.23
for _name in ("netket.logging.MLFlowLog", "netket.logging.WandbLog"):
    _cls = find(_name)
    if _cls is None:
        continue
    registry.register(
        _cls,
        name=_name,
        version=1,
        to_state=_tracking_to_state,
        from_state=_tracking_from_state,
        fields=("run_id", "last_step", "steps_since_last_params"),
        free_fields=("run_id", "last_step"),
        doc=(
            "`run_id`: the tracking run (the resumed logger continues it); `last_step`; "
            "`steps_since_last_params`: int. Points logged after the checkpoint by the interrupted "
            "process stay in the tracking store"
        ),
    )
