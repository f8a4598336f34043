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
    if not logger.isEnabledFor(level):
        return
    if logger.hasHandlers():
        logger.log(level, message)
    else:
        sys.stderr.write(f"nkserde: {message}\n")
        sys.stderr.flush()
