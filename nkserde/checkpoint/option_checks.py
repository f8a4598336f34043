"""The checks of a Checkpoint's options and of its policies: one table of
the string options and the values each may take (:data:`CHOICES`), one
shape for every error, ``ValueError("<option> must be <what it may be>,
got <what was given>")``, and the checks they share. No NetKet, no files.

>>> one_of("requeue", "sometimes")
Traceback (most recent call last):
ValueError: requeue must be one of 'auto', 'never', got 'sometimes'
"""

from __future__ import annotations

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
