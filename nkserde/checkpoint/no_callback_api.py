"""Stand-ins for :class:`nkserde.Checkpoint`, :func:`nkserde.checkpointed`
and :class:`nkserde.InitFrom` under NetKet releases without the callback API they hook into
(``netket.callbacks.AbstractCallback``, NetKet >= 3.22). ``save`` and
``load`` of every object work there; a run is checkpointed by hand."""

from __future__ import annotations

from ..errors import UnsupportedNetKetError


def _refuse(*args, **kwargs):
    import netket

    raise UnsupportedNetKetError(
        f"nkserde.Checkpoint and nkserde.checkpointed need NetKet's callback API "
        f"(netket.callbacks.AbstractCallback: NetKet >= 3.22; >= 3.23 for TDVP); this is "
        f"NetKet {netket.__version__}. "
        f"nkserde.save(driver, path) and nkserde.load(driver, path) work with this NetKet."
    )


Checkpoint = checkpointed = InitFrom = _refuse
