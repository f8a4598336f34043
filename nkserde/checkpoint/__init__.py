"""Checkpoint and resume a NetKet run: the :class:`Checkpoint` callback and
:func:`checkpointed`. The parts, each usable and tested alone:

    callback.py       Checkpoint: NetKet's hooks, the state machine of a run
    run_state.py      what a Checkpoint tracks while one run() call goes on
    restore.py        what a checkpoint holds of a run, and the resume that puts it back in place
    saving.py         the save path: write, verify, retire; write errors warned or raised
    interruptions.py  what stops a run early (signals, walltime, the processes' stop flag), the requeue after
    wrapper.py        checkpointed(driver, dir): run-<i> per run() call
    process_runs.py   what the process remembers across its runs (run numbering, steps, keys): one owner
    stops.py          final stop or interruption (NetKet's StopRun)
    choice.py         which checkpoint a run resumes (lock, fingerprint, newest that verifies)
    logger_histories.py  logger histories in the history log: a save appends the new rows, a resume reads them back
    fingerprint/      what defines a run, from content (the "same script?" check)
    keep_policy.py    which steps stay (keep=): KeepLatest, KeepMultiples, KeepAny; pure
    background_write.py  one write in flight, advanced by a low-priority thread or the caller;
                      errors raised later, finished at exit
    signals.py        a context that catches SIGTERM/SIGUSR1 and defers Ctrl-C
    job_control.py    the job around a run: walltime stop, why a signal came, requeue
    walltime.py       when to stop before the job's end: a pure policy on measured times
    stopped_time.py   how long the process was stopped (SIGSTOP ... SIGCONT), which the guard leaves out
    slurm.py          what SLURM's commands say of the job (time left, requeue)
    snapshot.py       the host copy a background write reads
    save_policy.py    when to checkpoint (every=): EverySteps, EveryDuration, WithinBudget, SaveAny; pure
    options.py        CheckpointOptions: every option of a Checkpoint, checked once
    option_checks.py  the table of string options, the one error shape, the checks the options share
    durations.py      durations as options give them and messages say them

Only callback.py, restore.py, saving.py, options.py (the default
final_stops), wrapper.py, stops.py and fingerprint/ know NetKet.
The directory's files and what a checkpoint file holds are
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
