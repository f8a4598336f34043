"""What a checkpoint file holds: the one owner of its layout.

A file the Checkpoint callback writes has root type ``"checkpoint"`` and
holds a dict of these keys (docs/schema.md, "Checkpoints"); the callback
builds it with :func:`payload`, and every reader (load, migrate, diff,
ls) tells one by :func:`is_checkpoint`. Knows no NetKet and no files.
"""

from __future__ import annotations

from .format.tree_codec import TYPE  # a registered object, not a plain dict

ROOT_TYPE = "checkpoint"

DRIVER = "driver"  # the driver, its variational state inside
COMPLETED_STEPS = "completed_steps"  # steps the driver had completed
STOPPED = "stopped"  # the run stopped for good there (a final stop)
TARGET = "target"  # the end the run was going to
LOGGERS = "loggers"  # process 0's loggers, by key
CALLBACKS = "callbacks"  # process 0's stateful callbacks, by key


def payload(driver, completed_steps: int, stopped: bool, target, loggers, callbacks) -> dict:
    """The dict a checkpoint file holds."""
    return {
        DRIVER: driver,
        COMPLETED_STEPS: completed_steps,
        STOPPED: stopped,
        TARGET: target,
        LOGGERS: loggers,
        CALLBACKS: callbacks,
    }


def is_checkpoint(state) -> bool:
    """Whether a state dict read from a file is a checkpoint's."""
    return isinstance(state, dict) and TYPE not in state and {DRIVER, COMPLETED_STEPS} <= set(state)


def is_checkpoint_template(template) -> bool:
    """Whether a template (what a user loads into) is a checkpoint's."""
    return isinstance(template, dict) and DRIVER in template and COMPLETED_STEPS in template
