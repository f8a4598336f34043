"""Checkpoint and resume a NetKet run: the :class:`Checkpoint` callback and
:func:`checkpointed`, as small parts each usable and tested alone (one line
per module: docs/explanations/design.md, "Layout", which a test keeps
complete), in rooms:

    callback.py, wrapper.py   the hooks' state machine, checkpointed()
    options.py, option_checks.py, save_policy.py, keep_policy.py
                              what the user configures: options checked once, policies
    run.py, process_runs.py   one run() call and how it ended; the process's runs
    persist/                  a checkpoint written and read back: save, background write,
                              resume, the loggers' histories
    job/                      the job around the run: signals, walltime, suspensions,
                              SLURM, the requeue, the abort watch
    fingerprint/              "is this the same script?"

Only callback.py, wrapper.py, options.py (the default final_stops),
run.py, persist/ and fingerprint/ know NetKet; job/ knows signals, clocks
and SLURM. The directory's files and what a checkpoint file holds are
nkserde.checkpoint_files's (the command line reads them too); it saves
through the save line (nkserde/saving/) and resumes through the load
(nkserde/loading/), as a user does, never through the public API module.

Imports: errors, _log, _warnings, jax_internals, types/, format/,
processes/, netket/, caches/, checkpoint_files/, saving/, loading/.
"""

import importlib

# Loaded on first use (PEP 562): a part that knows no NetKet (the
# policies, SLURM, the history logs) imports alone, without the callback
# and NetKet.
_NAMES = {
    "EXIT_INTERRUPTED": ("job.control", "EXIT_INTERRUPTED"),
    "FINAL_STOPS": ("run", "FINAL_STOPS"),
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
    # the job around the run (job=), where a run without checkpoints starts from (init_from=)
    "JobOptions": ("job.control", "JobOptions"),
    "InitFrom": ("options", "InitFrom"),
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
