"""Stand-ins for :class:`nkserde.Checkpoint` and :func:`nkserde.checkpointed`
under NetKet releases without the callback API they hook into
(``netket.callbacks.AbstractCallback``, NetKet 3.22 has it; 3.23 also fixes a
run's end before ``on_run_start``, which resuming needs). ``save`` and
``load`` of every object work there; a run is checkpointed by hand."""

from __future__ import annotations

from .errors import UnsupportedNetKetError


def _refuse(*args, **kwargs):
    import netket

    raise UnsupportedNetKetError(
        f"nkserde.Checkpoint and nkserde.checkpointed need NetKet >= 3.23 (its callback API, "
        f"netket.callbacks.AbstractCallback, and a run loop that fixes its end before "
        f"on_run_start); this is NetKet {netket.__version__}. "
        f"nkserde.save(driver, path) and nkserde.load(driver, path) work with this NetKet.")


Checkpoint = checkpointed = _refuse
