# ruff: noqa: F401  (a module of re-exports: nkserde/__init__.py takes its names)
"""The public API of nkserde (the names of ``nkserde.__all__``), loaded on
first use of any of them (nkserde/__init__.py): each name bound to where it
lives. It imports JAX, NetKet and the NetKet registrations, which the
command line's header readers do without."""

from .saving.line import save, save_state_dict
from .saving.snapshot import state_dict
from .loading.load import from_state_dict, load, load_state_dict
from .loading.open_file import open_file as open  # noqa: A004 (nkserde.open, as h5py.File, zarr.open)
from .loading.file_info import info, verify
from .format.limits import set_load_limits
from .types.placement import per_process
from .loading.partial_load import LoadReport, PartialLoadWarning
from .schema.migrate import migrate
from .types.registry import migration, register
from .caches import automatic as _automatic_caches, use as compilation_cache
from . import netket as _netket_registrations
from .netket._common import find as _find

from .checkpoint.keep_policy import KeepAny, KeepLatest, KeepMultiples
from .checkpoint.save_policy import EveryDuration, EverySteps, SaveAny, WithinBudget
from .checkpoint.job.control import JobOptions
from .checkpoint.persist.run_history import history

if _find("netket.callbacks.AbstractCallback") is not None:
    from .checkpoint import Checkpoint, checkpointed
    from .checkpoint.options import InitFrom
else:  # NetKet 3.21: no callback API to hook a checkpoint into
    from .checkpoint.no_callback_api import Checkpoint, InitFrom, checkpointed


# the caches beside JAX's, before a Checkpoint's first step (nkserde.caches.automatic)
_automatic_caches.complete()
