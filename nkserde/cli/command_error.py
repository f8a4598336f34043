"""The one-line error of a command (:class:`CommandError`), and the
checks of the paths a command is given that raise it."""

from __future__ import annotations

from pathlib import Path


class CommandError(Exception):
    """An error the command reports in one line (exit code ``code``; None:
    the command's own code for an error, 1 but for diff)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


def existing(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise CommandError(f"{path}: no such file or directory")
    return p


def existing_file(path: str) -> Path:
    p = existing(path)
    if p.is_dir():
        raise CommandError(f"{path}: is a directory (nkserde ls lists a checkpoint directory)")
    return p
