"""A checkpoint directory on disk: how checkpoints are named, listed and
found. Knows files only (no NetKet, no registry).

    ckpt/                      a Checkpoint's directory
      step-0000000015.nks      one checkpoint: 15 completed steps
      fingerprint.json         what defines the run
      .lock                    while a run uses the directory
    ckpt/                      a checkpointed(...) directory
      run-0/ run-1/ ...        one Checkpoint directory per run() call
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from . import format as fileformat
from .errors import CorruptFileError, NkserdeError, UnsupportedVersionError

STEP_FILE = re.compile(r"^step-(\d+)\.nks$")
RUN_DIRECTORY = re.compile(r"^run-(\d+)$")


def step_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step-{step:010d}.nks"


def steps(directory: Path) -> list[int]:
    """Steps that have a checkpoint file in ``directory``, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = (STEP_FILE.match(p.name) for p in directory.iterdir())
    return sorted(int(m.group(1)) for m in found if m)


def runs(directory: Path) -> list[Path]:
    """The ``run-<i>`` subdirectories of a ``checkpointed(...)`` directory,
    in order."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := RUN_DIRECTORY.match(p.name))]
    return [p for _, p in sorted(found)]


def verifies(path: Path) -> bool:
    try:
        fileformat.drain(fileformat.verify_steps(Path(path)))
        return True
    except (CorruptFileError, UnsupportedVersionError, OSError):
        return False


def latest(directory: Path, *, warn: bool = False) -> Path | None:
    """The newest checkpoint in ``directory`` that verifies, or None.
    ``warn``: say which damaged ones were skipped."""
    for step in reversed(steps(directory)):
        path = step_path(directory, step)
        if verifies(path):
            return path
        if warn:
            warnings.warn(f"nkserde: skipping damaged checkpoint {path}", stacklevel=2)
    return None


def newest_verified(directory: Path) -> Path:
    """The checkpoint file :func:`nkserde.load` reads for a directory: the
    newest that verifies in a Checkpoint directory, or in the only run of a
    ``checkpointed(...)`` directory. Raises NkserdeError when there is none
    or the choice is ambiguous."""
    directory = Path(directory)
    if not steps(directory):
        subdirectories = runs(directory)
        if len(subdirectories) > 1:
            names = ", ".join(str(p) for p in subdirectories)
            raise NkserdeError(f"{directory}: holds the checkpoints of {len(subdirectories)} run() "
                               f"calls; load one of {names}")
        if subdirectories:
            directory = subdirectories[0]
    found = latest(directory, warn=True)
    if found is None:
        raise NkserdeError(f"{directory}: no checkpoint that verifies")
    return found
