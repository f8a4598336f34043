"""One Checkpoint's directory: its checkpoint files, its fingerprint, its
lock, moving old checkpoints aside and retiring old ones. Knows files only
(no NetKet); naming and listing are nkserde.directory's.

    ckpt/
      step-0000000015.nks      one checkpoint: 15 completed steps
      fingerprint.json         what defines the run (nkserde.fingerprint)
      .lock                    while a run uses the directory (DirectoryLock)
      previous-<time>/         checkpoints moved aside by resume="never"
"""

from __future__ import annotations

import contextlib
import datetime
import json
from pathlib import Path

from .. import directory as naming
from ..errors import CorruptFileError
from ..format import bounded, limits
from ..format.atomic import atomic_write
from .lock import DirectoryLock
from .retention import Retention

FINGERPRINT_FILE = naming.FINGERPRINT_FILE


class RunDirectory:
    """The files of one checkpointed run in ``path`` (created on demand)."""

    def __init__(self, path):
        self.path = Path(path)
        self.lock = DirectoryLock(self.path)

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def steps(self) -> list[int]:
        """Steps that have a checkpoint file, oldest first."""
        return naming.steps(self.path)

    def step_path(self, step: int) -> Path:
        return naming.step_path(self.path, step)

    def latest(self) -> Path | None:
        """Path of the newest checkpoint that verifies, or None."""
        return naming.latest(self.path)

    @property
    def fingerprint_path(self) -> Path:
        return self.path / FINGERPRINT_FILE

    def has_history(self) -> bool:
        """Whether a run has used this directory (checkpoints or a fingerprint)."""
        return bool(self.steps()) or self.fingerprint_path.exists()

    def read_fingerprint(self) -> dict:
        """The stored fingerprint, or {} when there is none. A damaged one
        (not a JSON object, or past the header limit: it is a
        few KiB) is a CorruptFileError naming it."""
        if not self.fingerprint_path.exists():
            return {}
        fields = bounded.read_json(self.fingerprint_path, limits.current().max_header_bytes, "run fingerprint")
        if not isinstance(fields, dict):
            raise CorruptFileError(f"{self.fingerprint_path}: the run fingerprint is not a JSON object")
        return fields

    def write_fingerprint(self, fingerprint: dict) -> None:
        with atomic_write(self.fingerprint_path) as f:
            f.write(json.dumps(fingerprint, indent=1, sort_keys=True).encode())

    def move_aside(self) -> Path:
        """Moves every checkpoint and the fingerprint into a new
        ``previous-<time>/`` (nothing is deleted); returns it."""
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        target = self.path / f"previous-{stamp}"
        target.mkdir()
        for p in self.path.iterdir():
            if naming.STEP_FILE.match(p.name) or p.name == FINGERPRINT_FILE:
                p.rename(target / p.name)
        return target

    def retire(self, policy: Retention, newest: int) -> list[int]:
        """Deletes the checkpoints ``policy`` does not keep once ``newest``
        is written and verified; returns their steps."""
        retired = policy.retired(self.steps(), newest)
        for step in retired:
            with contextlib.suppress(FileNotFoundError):
                self.step_path(step).unlink()
        return retired
