"""Warnings shown at the user's line: ``warnings.warn(...,
stacklevel=outside())`` attributes a warning to the first frame of the
stack that is neither nkserde's nor NetKet's: the script's
``nkserde.load(...)`` or ``driver.run(...)`` (a Checkpoint's warnings are
raised from NetKet's loop), however deep inside the warning was raised.
A fixed ``stacklevel`` names nkserde's own line as soon as one more
function sits between the call and the warning."""

from __future__ import annotations

import os
import sys

_NKSERDE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _internal_prefixes() -> tuple[str, ...]:
    prefixes = [_NKSERDE]
    netket = sys.modules.get("netket")  # never imported here: only where it runs already
    if netket is not None and getattr(netket, "__file__", None):
        prefixes.append(os.path.dirname(os.path.abspath(netket.__file__)) + os.sep)
    return tuple(prefixes)


def outside() -> int:
    """The ``stacklevel`` at which ``warnings.warn``, called by the caller
    of this function, names the first frame outside nkserde and NetKet."""
    import inspect  # here: warnings are rare, and the command line starts without it

    internal = _internal_prefixes()
    frame, level = inspect.currentframe().f_back, 1  # the function that calls warnings.warn: stacklevel 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(internal):
        frame, level = frame.f_back, level + 1
    return level
