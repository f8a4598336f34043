"""Where nkserde's functions lived until this release, kept for one more:
each name still works, with a DeprecationWarning that says where it lives
now. The public names are ``nkserde``'s (``nkserde.save``,
``nkserde.load``, ...); the save is nkserde/saving/, the load
nkserde/loading/."""

from __future__ import annotations

import importlib
import warnings

# each former name of nkserde.api -> the module it lives in now
MOVED = {
    "save": "nkserde.saving.line",
    "save_state_dict": "nkserde.saving.line",
    "new_meta": "nkserde.saving.line",
    "installed_version": "nkserde.saving.line",
    "state_dict": "nkserde.saving.snapshot",
    "check_storable": "nkserde.saving.snapshot",
    "load": "nkserde.loading.load",
    "from_state_dict": "nkserde.loading.load",
    "load_state_dict": "nkserde.loading.load",
    "written_by": "nkserde.loading.load",
    "OpenFile": "nkserde.loading.open_file",
    "open_file": "nkserde.loading.open_file",
    "info": "nkserde.loading.file_info",
    "verify": "nkserde.loading.file_info",
    "verify_steps": "nkserde.loading.file_info",
    "contents": "nkserde.loading.file_info",
    "jsonable": "nkserde.loading.file_info",
    "is_registered": "nkserde.types.registry",
    "stored_fields": "nkserde.types.registry",
}


def __getattr__(name: str):
    if name not in MOVED and name != "save_state_dict_steps":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = "nkserde.saving.line.save_steps" if name == "save_state_dict_steps" else f"{MOVED[name]}.{name}"
    warnings.warn(f"nkserde.api.{name} is now {where}; nkserde.api goes in the next release", DeprecationWarning, 2)
    importlib.import_module("nkserde._public")  # NetKet's types registered, as importing nkserde.api did
    if name == "save_state_dict_steps":
        return _save_state_dict_steps
    return getattr(importlib.import_module(MOVED[name]), name)


def _save_state_dict_steps(state, path, *, root_type=None, sequence=None, held=()):
    """The former signature of ``nkserde.saving.line.save_steps``."""
    line, snapshot = importlib.import_module("nkserde.saving.line"), importlib.import_module("nkserde.saving.snapshot")
    return line.save_steps(snapshot.Snapshot(state, list(held)), path, root_type=root_type, sequence=sequence)
