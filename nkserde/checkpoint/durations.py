"""Durations as a user writes them and as nkserde's messages say them:
one parser of the Checkpoint's options (``every="15min"``, ``mtbf="24h"``)
and one formatter of every message that names a duration (an interval
between checkpoints, a SLURM job's time left).

>>> parse_duration("15min"), format_duration(900.0), format_duration(7188.0)
(900.0, '15 min', '01:59:48')
"""

from __future__ import annotations

import datetime
import re
import time

_UNITS = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600}  # fmt: skip
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-z]+)\s*$")
_DAY = 86400.0


def parse_duration(value) -> float:
    """Seconds of ``"90s"``, ``"15min"``, ``"2h"``, a ``timedelta`` or a
    number of seconds; ValueError otherwise."""
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value.lower())) and match.group(2) in _UNITS:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ValueError(f"{value!r} is not a duration: write it as '90s', '15min' or '2h' (or a timedelta)")
    if not seconds > 0:
        raise ValueError(f"{value!r}: a duration must be positive")
    return seconds


def format_duration(seconds: float | None) -> str:
    """``seconds`` in words: under two minutes ``"90 s"`` (three digits),
    whole hours ``"2 h"``, whole minutes ``"15 min"``, anything else under
    a day ``"01:59:48"``, then ``"1.5 days"``; ``"?"`` for None (not
    measured yet). A negative duration (a deadline passed) is ``"0 s"``."""
    if seconds is None:
        return "?"
    seconds = max(0.0, float(seconds))
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds % 3600 == 0:
        return f"{seconds // 3600:.0f} h"
    if seconds % 60 == 0 and seconds < _DAY:
        return f"{seconds // 60:.0f} min"
    if seconds < _DAY:
        return time.strftime("%H:%M:%S", time.gmtime(seconds))
    return f"{seconds / _DAY:.1f} days"
