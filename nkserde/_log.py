"""nkserde's messages: one line each, through Python's ``logging`` (logger
``"nkserde"``). Where the program configured no logging at all, the lines
go to stderr so a user sees that a run resumed; ``logging.getLogger(
"nkserde").setLevel(logging.WARNING)`` silences them."""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("nkserde")
if logger.level == logging.NOTSET:
    logger.setLevel(logging.INFO)


def say(message: str, level: int = logging.INFO) -> None:
    """One line. In a run of several JAX processes, information comes from
    process 0 alone (the same line from 1024 processes says nothing more);
    warnings from every process that has one."""
    if not logger.isEnabledFor(level) or (level < logging.WARNING and _not_process_0()):
        return
    if logger.hasHandlers():
        logger.log(level, message)
    else:
        sys.stderr.write(f"nkserde: {message}\n")
        sys.stderr.flush()


def _not_process_0() -> bool:
    if "jax" not in sys.modules:  # the command line: one process
        return False
    from . import jax_internals

    return jax_internals.process_id() != 0
