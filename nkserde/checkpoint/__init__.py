"""Checkpoint and resume a NetKet run: the :class:`Checkpoint` callback and
:func:`checkpointed`, as small parts each usable and tested alone (one line
per module: docs/explanations/design.md, "Layout", which a test keeps
complete). Only callback.py, restore.py, saving.py, options.py (the default
final_stops), wrapper.py, stops.py and fingerprint/ know NetKet. The
directory's files and what a checkpoint file holds are
nkserde.checkpoint_files's (below ``api``; the command line reads them).
"""

import importlib

# Loaded on first use (PEP 562): a part that knows no NetKet (the
# policies, SLURM, the history logs) imports alone, without the callback
# and NetKet.
_NAMES = {
    "EXIT_INTERRUPTED": ("job_control", "EXIT_INTERRUPTED"),
    "FINAL_STOPS": ("stops", "FINAL_STOPS"),
    "RESUME_MODES": ("option_checks", "RESUME_MODES"),
    "Checkpoint": ("callback", "Checkpoint"),
    # when to save (every=) and what to keep (keep=): policies that combine with |
    "EverySteps": ("save_policy", "EverySteps"),
    "EveryDuration": ("save_policy", "EveryDuration"),
    "WithinBudget": ("save_policy", "WithinBudget"),
    "SaveAny": ("save_policy", "SaveAny"),
    "SavePolicy": ("save_policy", "SavePolicy"),
    "KeepLatest": ("keep_policy", "KeepLatest"),
    "KeepMultiples": ("keep_policy", "KeepMultiples"),
    "KeepAny": ("keep_policy", "KeepAny"),
    "KeepPolicy": ("keep_policy", "KeepPolicy"),
    "checkpointed": ("wrapper", "checkpointed"),
    "reset_run_numbering": ("process_runs", "reset_run_numbering"),
    "fingerprint_changes": ("fingerprint", "changes"),
}

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _NAMES[name]
    value = getattr(importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))
