"""nkserde: save and restore everything a NetKet simulation needs.

Public API::

    nkserde.save(obj, path)              -> Path
    nkserde.load(template, path)         -> new object like template
    nkserde.load(template, path, at="state", strict=False, rename={...}, report=True)
                                         -> a part of the file, what matches, (object, LoadReport)
    nkserde.state_dict(obj)              -> nested dicts of numpy arrays / scalars
    nkserde.from_state_dict(template, sd)
    nkserde.load_state_dict(path)        -> the file's state dict, no template
    nkserde.info(path)                   -> dict of metadata
    nkserde.open(path)                   -> reader: f["state/parameters/Dense/kernel"], f.keys(), f.info
    nkserde.verify(path)                 -> info, after checking every checksum
    nkserde.register(cls, name=..., version=..., to_state=..., from_state=...)
    nkserde.migration(name, from_version)
    nkserde.migrate(src, dst=None)       -> rewrites a file at today's format and schemas
    nkserde.per_process(value, derive=None)   in a to_state: a value each JAX process has its own of
    nkserde.set_load_limits(max_load_bytes=None, max_header_bytes=None)   ceilings of a load
    nkserde.errors
    nkserde.Checkpoint(directory, every=50, ...)   NetKet callback: checkpoint and resume
    nkserde.checkpointed(driver, directory, ...)  the driver, checkpointing every run
"""

from . import errors
from .api import from_state_dict, info, load, load_state_dict, save, save_state_dict, state_dict, verify
from .api import open_file as open  # noqa: A004 (nkserde.open, as h5py.File, zarr.open)
from .format.limits import set_load_limits
from .placement import per_process
from .partial_load import LoadReport, PartialLoadWarning
from .file_migration import migrate
from .registry import migration, register
from . import netket as _netket_registrations  # noqa: F401,E402
from .netket._common import find as _find  # noqa: E402,F401

if _find("netket.callbacks.AbstractCallback") is not None:
    from .checkpoint import Checkpoint, checkpointed  # noqa: E402
else:  # NetKet 3.21: no callback API to hook a checkpoint into
    from ._no_callback_api import Checkpoint, checkpointed  # noqa: E402

__version__ = "0.1.0"
__all__ = [
    "Checkpoint",
    "LoadReport",
    "PartialLoadWarning",
    "checkpointed",
    "errors",
    "from_state_dict",
    "info",
    "load",
    "load_state_dict",
    "migrate",
    "migration",
    "open",
    "per_process",
    "register",
    "save",
    "save_state_dict",
    "set_load_limits",
    "state_dict",
    "verify",
]
