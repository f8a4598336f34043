"""Which checkpoints a directory keeps: a pure policy, no files.

>>> Retention(keep=2, keep_every=10).retired([5, 10, 15, 20, 25], newest=25)
[5, 15]
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retention:
    """Keeps the ``keep`` newest checkpoints, and every checkpoint whose step
    is a multiple of ``keep_every`` (None: none besides the newest).

    Only steps up to ``newest`` (the checkpoint just written and verified)
    are considered: a newer file than the one that triggered retention is
    never touched, and a checkpoint that failed never retires the good ones
    before it (retention runs only after a verified write)."""

    keep: int = 3
    keep_every: int | None = None

    def __post_init__(self):
        if self.keep < 1:
            raise ValueError(f"keep must be >= 1, got {self.keep}")
        if self.keep_every is not None and self.keep_every < 1:
            raise ValueError(f"keep_every must be >= 1 or None, got {self.keep_every}")

    def kept(self, steps, newest: int) -> list[int]:
        """The steps of ``steps`` that stay, ascending."""
        candidates = sorted(s for s in steps if s <= newest)
        keep = set(candidates[-self.keep :])
        if self.keep_every:
            keep |= {s for s in candidates if s % self.keep_every == 0}
        keep |= {s for s in steps if s > newest}
        return sorted(keep)

    def retired(self, steps, newest: int) -> list[int]:
        """The steps of ``steps`` to delete, ascending."""
        kept = set(self.kept(steps, newest))
        return sorted(s for s in steps if s not in kept)
