"""A NetKet user's run.py for the SLURM and Open MPI tests (tests/test_slurm.py,
tests/test_mpi.py): a small VMC with one ``nkserde.checkpointed`` line,
run by the job scripts of examples/slurm/ (``srun python run.py``) or by
``mpirun``, and without any launcher for the reference.

    python cluster_run.py            # in the job's directory: ckpt/, out/, result.npz there

Several processes: ``jax.distributed.initialize()`` with no arguments
but the guide's heartbeat timeout under ``srun`` (SLURM's environment)
and ``mpirun`` (Open MPI's); the
reference of a two-process run is started by hand with
``CLUSTER_COORDINATOR=127.0.0.1:PORT CLUSTER_PROCESSES=2 CLUSTER_RANK=r``.

Environment (all optional; the numbers never depend on them):
    STEP_SECONDS=s        sleep s seconds at the end of every step (a
                          step as slow as a real one, without the CPU)
    N_ITER=n              steps of the run (default 40)
    CHECKPOINT_DIRECTORY  where the checkpoints go (default ckpt)
    RAISE_AT=k            raise RuntimeError at the start of step k
    REQUEUE_ON_ERROR=n    Checkpoint(job=JobOptions(requeue_on_error=n))
    AUTO_SLURM_REQUEUE=s  NetKet's AutoSlurmRequeue(before=s seconds) beside nkserde
    HEARTBEAT_SECONDS=s   jax.distributed.initialize(heartbeat_timeout_seconds=s) under a launcher
    ABORT_AT_SIGCONT=1    the first attempt aborts 2 s after a SIGCONT if JAX has not
    PAUSE_IN_SAVE=k       the first attempt of the job pauses inside the save of
                          step k (before the fsync of its temporary file, on
                          process PAUSE_RANK, default 0), having printed
                          ``in-save <k> <time>``: a node killed then dies in a save
    PUBLISH=1             at the end, fsync result.npz and the JsonLog (what an
                          NFS client's close does; the tests' shared file system
                          publishes only what is fsynced)
    JAX_COMPILATION_CACHE_DIR  (JAX's own) shared by the jobs' processes

Process 0 prints, one line each, with the wall-clock time:
    step <k> <time>       in on_step_end of step k (k = 1, 2, ...): completed
    signal <NAME> <time>  a SIGUSR1/SIGTERM reached this process
    exit <status> <time>  at interpreter exit
and writes result.npz (the final parameters) when the run reaches its end.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
if os.environ.get("CLUSTER_COORDINATOR"):
    jax.distributed.initialize(
        coordinator_address=os.environ["CLUSTER_COORDINATOR"],
        num_processes=int(os.environ["CLUSTER_PROCESSES"]),
        process_id=int(os.environ["CLUSTER_RANK"]),
    )
elif int(os.environ.get("SLURM_NTASKS", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) > 1:
    # ranks and coordinator from srun's or mpirun's environment; the
    # heartbeat of docs/guides/slurm.md's run.py (a suspended job goes on)
    jax.distributed.initialize(heartbeat_timeout_seconds=int(os.environ.get("HEARTBEAT_SECONDS", 24 * 3600)))

import netket as nk  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from netket.utils import struct  # noqa: E402

import nkserde  # noqa: E402

RANK = jax.process_index()


def say(what: str) -> None:
    if RANK == 0:
        print(f"{what} {time.time():.3f}", flush=True)


exit_status = [0]


def record_exit_status():
    say(f"exit {exit_status[0]}")


atexit.register(record_exit_status)


def note_signal(signum, frame):
    """Notes the signal. Installed before nkserde's handler, which calls it
    (the handler it replaced). While it is the handler itself (before and
    after the run), a SIGTERM ends the process as Python's default would
    (process 0 ignores the one of nkserde's own requeue: never called);
    a SIGUSR1 after the run is ignored, as nkserde makes the default do in
    a SLURM job (job.control.absorb_late_signals: the job's --signal may
    come after the run ended)."""
    say(f"signal {signal.Signals(signum).name}")
    if signum == signal.SIGTERM and signal.getsignal(signum) is note_signal:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


for signum in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(signum, note_signal)


class Progress(nk.callbacks.AbstractCallback):
    """Reports each completed step; sleeps to make a step last STEP_SECONDS;
    raises at step RAISE_AT."""

    seconds: float = struct.field(pytree_node=False, serialize=False)
    raise_at: int = struct.field(pytree_node=False, serialize=False)

    def __init__(self):
        self.seconds = float(os.environ.get("STEP_SECONDS", "0"))
        self.raise_at = int(os.environ.get("RAISE_AT", "-1"))

    @property
    def callback_order(self) -> int:
        return 1500  # after the loggers and the Checkpoint

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == self.raise_at:
            raise RuntimeError(f"a bug in the user's script at step {self.raise_at}")

    def on_step_end(self, step, log_data, driver):
        say(f"step {driver.step_count + 1}")  # NetKet counts the step after on_step_end
        time.sleep(self.seconds)


graph = nk.graph.Chain(8)
hilbert = nk.hilbert.Spin(0.5, N=8)
hamiltonian = nk.operator.Ising(hilbert, graph, h=1.0)
sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
vstate = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=64, seed=1, sampler_seed=2)
gs = nk.driver.VMC(hamiltonian, optax.adam(0.01), variational_state=vstate)
directory = os.environ.get("CHECKPOINT_DIRECTORY", "ckpt")
job = nkserde.JobOptions(requeue_on_error=int(os.environ.get("REQUEUE_ON_ERROR", "0")))
gs = nkserde.checkpointed(gs, directory, every=5, job=job)

if os.environ.get("ABORT_AT_SIGCONT") and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
    # What JAX's heartbeat abort does to a job continued after a long
    # suspension (SIGABRT, no Python exit), for the times it does not: its
    # service's check and the tasks' first heartbeats race at the resume,
    # and a heartbeat that wins keeps the job alive (once in 8 tries
    # here). JAX's own abort, when it comes, lands within the 2 s this waits.
    def abort_at_sigcont(signum, frame):
        time.sleep(2.0)
        print(f"aborting at SIGCONT {time.time():.3f}", flush=True)
        os.abort()

    signal.signal(signal.SIGCONT, abort_at_sigcont)  # nkserde's SIGCONT handler calls it

if os.environ.get("PAUSE_IN_SAVE") and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
    pause_step, pause_rank = int(os.environ["PAUSE_IN_SAVE"]), int(os.environ.get("PAUSE_RANK", "0"))
    real_fsync = os.fsync

    def fsync_pausing_in_the_save(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        if RANK == pause_rank and f"step-{pause_step:010d}.nks~" in target and target.endswith(".nkserde-tmp"):
            print(f"in-save {pause_step} {time.time():.3f}", flush=True)
            time.sleep(3600)
        real_fsync(fd)

    os.fsync = fsync_pausing_in_the_save

callbacks = [Progress()]
if os.environ.get("AUTO_SLURM_REQUEUE"):
    from datetime import timedelta

    before = timedelta(seconds=float(os.environ["AUTO_SLURM_REQUEUE"]))
    callbacks.append(nk.callbacks.AutoSlurmRequeue(before=before, max_requeue_count=9))

try:
    gs.run(n_iter=int(os.environ.get("N_ITER", "40")), out="out/log", callback=callbacks, show_progress=False)
except SystemExit as stop:
    exit_status[0] = stop.code
    raise
except BaseException:
    exit_status[0] = 1
    raise

if RANK == 0:
    leaves = jax.tree_util.tree_leaves_with_path(gs.state.parameters)
    np.savez("result.npz", step_count=gs.step_count, **{jax.tree_util.keystr(p): np.asarray(x) for p, x in leaves})
    if os.environ.get("PUBLISH"):
        for path in ("result.npz", "out/log.log"):
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
say("finished")
sys.exit(0)
