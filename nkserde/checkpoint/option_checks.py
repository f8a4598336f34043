"""The checks of a Checkpoint's options and of its policies: one table of
the string options and the values each may take (:data:`CHOICES`), one
shape for every error, ``ValueError("<option> must be <what it may be>,
got <what was given>")``, the checks they share, and durations: the one
parser of those a user writes (``every="15min"``, ``mtbf="24h"``) and the
one formatter of those nkserde's messages say. No NetKet, no files.

>>> one_of("requeue", "sometimes")
Traceback (most recent call last):
ValueError: requeue must be one of 'auto', 'never', got 'sometimes'
"""

from __future__ import annotations

import datetime
import re
import time

RESUME_MODES = ("auto", "force", "never", "must")
WRITE_ERROR_MODES = ("warn", "raise")
REQUEUE_MODES = ("auto", "never")
# the string options and the values each may take
CHOICES = {"resume": RESUME_MODES, "on_write_error": WRITE_ERROR_MODES, "requeue": REQUEUE_MODES}


def bad_option(option: str, expected: str, found) -> ValueError:
    """The error of ``option`` given as ``found`` where ``expected`` was."""
    return ValueError(f"{option} must be {expected}, got {found!r:.80}")


def one_of(option: str, value) -> str:
    """``value`` if it is one of the choices of the string ``option``."""
    choices = CHOICES[option]
    if not isinstance(value, str) or value not in choices:
        raise bad_option(option, "one of " + ", ".join(map(repr, choices)), value)
    return value


def whole(option: str, value, *, least: int) -> int:
    """``value`` if it is an int (not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise bad_option(option, f"an int >= {least}", value)
    return value


def is_number(value) -> bool:
    """A real number of Python or numpy, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def combined(option: str, policies: tuple, kind: type, expected: str) -> tuple:
    """The ``policies`` an any-of combination (``option``) is made of, each
    a ``kind`` (what ``expected`` says), those of a combination among them
    taken in its place: ``(a | b) | c`` is ``a | b | c``."""
    flat = []
    for policy in policies:
        if not isinstance(policy, kind):
            raise bad_option(option, expected, policy)
        flat.extend(getattr(policy, "policies", (policy,)))
    if not flat:
        raise bad_option(option, f"at least one of {expected}", ())
    return tuple(flat)


# ------------------------------------------------------------------ durations


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
