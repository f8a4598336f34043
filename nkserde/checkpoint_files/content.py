"""What a checkpoint file holds: the one owner of its layout.

A file the Checkpoint callback writes has root type ``"checkpoint"`` and
holds a dict of these keys (docs/schema.md, "Checkpoints"); the callback
builds it with :func:`payload`, and every reader (load, migrate, diff,
ls) tells one by :func:`is_checkpoint`. Knows no NetKet and no files.

Layout 2 (``LAYOUT``; files without the key are layout 1): a logger whose
history is in the directory's history log is stored as a
``LOGGER_HISTORY`` stub (nkserde/checkpoint/persist/logger_histories.py), and
``HISTORY`` is the log's position at the checkpoint (None when no
logger's history is there). In layout 1 every logger holds its whole
history; layout 1 files are read as they are.
"""

from __future__ import annotations

from ..format.tree_codec import TYPE  # a registered object, not a plain dict

ROOT_TYPE = "checkpoint"

DRIVER = "driver"  # the driver, its variational state inside
COMPLETED_STEPS = "completed_steps"  # steps the driver had completed
STOPPED = "stopped"  # the run stopped for good there (a final stop)
TARGET = "target"  # the end the run was going to
LOGGERS = "loggers"  # process 0's loggers, by key
CALLBACKS = "callbacks"  # process 0's stateful callbacks, by key
LAYOUT = "layout"  # the version of this layout: absent in layout 1
HISTORY = "history"  # where the history log ended at this checkpoint (layout 2)

LAYOUT_VERSION = 2  # 2: logger histories in the directory's history log
# a logger whose history is in the history log, in place of the logger
LOGGER_HISTORY = "nkserde.checkpoint.LoggerHistory"


def payload(driver, completed_steps: int, stopped: bool, target, loggers, callbacks) -> dict:
    """The dict a checkpoint file holds."""
    return {
        DRIVER: driver,
        COMPLETED_STEPS: completed_steps,
        STOPPED: stopped,
        TARGET: target,
        LOGGERS: loggers,
        CALLBACKS: callbacks,
        LAYOUT: LAYOUT_VERSION,
        HISTORY: None,  # set as the checkpoint is written (nkserde.checkpoint.persist.logger_histories)
    }


def is_checkpoint(state) -> bool:
    """Whether a state dict read from a file is a checkpoint's."""
    return isinstance(state, dict) and TYPE not in state and {DRIVER, COMPLETED_STEPS} <= set(state)


def history_position(state):
    """The history log position a checkpoint's state (or its header tree)
    records, or None (layout 1, or no logger history in a log)."""
    return state.get(HISTORY) if is_checkpoint(state) else None


def is_checkpoint_template(template) -> bool:
    """Whether a template (what a user loads into) is a checkpoint's."""
    return isinstance(template, dict) and DRIVER in template and COMPLETED_STEPS in template
