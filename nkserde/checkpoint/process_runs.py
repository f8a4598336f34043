"""What this process remembers across its checkpointed runs: the one
place where the checkpoint package keeps process-wide state, owned by
:data:`PROCESS_RUNS`.

* the ``run()`` calls of :func:`~nkserde.checkpointed` drivers per
  directory, which number their ``run-<i>`` subdirectories, and the call
  that was interrupted there (the later ones do not start);
* the steps checkpointed runs completed in this process: a SLURM job that
  completed none is not requeued (its next attempt would not either);
* the coordination keys each run of a multi-process script used (every
  process counts the same sequence, so each run gets fresh keys).

``nkserde.checkpoint.reset_run_numbering()`` (:meth:`ProcessRuns.reset`)
makes the next ``run()`` calls numbered as in a new process: for tests and
notebooks that restart a script within one Python process. It leaves the
steps and the keys: they belong to the process (the job, the coordination
service it talks to), not to the script, and a key used once must not be
used again in the same coordination service.
"""

from __future__ import annotations

import itertools
from pathlib import Path


class ProcessRuns:
    """The run bookkeeping of one process (see the module doc)."""

    def __init__(self):
        self._calls: dict[str, int] = {}  # run() calls made so far per checkpointed(...) directory
        self._interrupted: dict[str, str] = {}  # per directory, what interrupted one of its run() calls
        self._keys: dict[str, itertools.count] = {}  # runs that used each coordination name
        self.steps_done = 0  # steps completed by checkpointed runs

    def next_run(self, directory: Path) -> tuple[int, str | None]:
        """The index of the next ``run()`` call on ``directory`` (a
        ``checkpointed`` directory, every driver's calls counted together),
        and why it must not start (an earlier call of this process was
        interrupted), or None."""
        key = _key(directory)
        index = self._calls.get(key, 0)
        self._calls[key] = index + 1
        return index, self._interrupted.get(key)

    def interrupted(self, directory: Path, why: str) -> None:
        """A ``run()`` call on ``directory`` was interrupted (``why``): the
        later ones of this process do not start."""
        self._interrupted[_key(directory)] = why

    def count_step(self) -> None:
        self.steps_done += 1

    @property
    def progressed(self) -> bool:
        """Whether a checkpointed run of this process completed a step."""
        return self.steps_done > 0

    def numbered(self, name: str) -> str:
        """``name`` and how many runs in this process used it before: every
        process runs the same sequence, so each run gets its own keys."""
        return f"{name}:{next(self._keys.setdefault(name, itertools.count()))}"

    def reset(self) -> None:
        """The run numbering and the interrupted runs, as in a new process
        (the steps and the coordination keys stay: see the module doc)."""
        self._calls.clear()
        self._interrupted.clear()


def _key(directory: Path) -> str:
    return str(Path(directory).resolve())


PROCESS_RUNS = ProcessRuns()


def reset_run_numbering() -> None:
    """Numbers the next ``run()`` calls of checkpointed drivers from
    ``run-0`` again, as in a new process: for tests and notebooks that
    restart a script within one Python process."""
    PROCESS_RUNS.reset()
