"""The job around a checkpointed run: what stops it before its end and what
follows (nkserde.checkpoint.job.interruptions, the one entry point of the
Checkpoint), the signals it catches (signals.py), the walltime guard
(walltime.py, control.py) and the time the process was suspended
(stopped_time.py), the SLURM job (slurm.py), its requeue (requeue.py; after
a lost process by a process that outlives the run's: lasting_requeue.py)
and the watcher that requeues a job JAX aborted (abort_watch.py). Signals,
clocks and SLURM's commands; no NetKet, no files."""
