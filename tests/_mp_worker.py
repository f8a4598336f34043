"""One process of a multi-process NetKet run, for tests/test_distributed.py.

    python _mp_worker.py RANK N PORT ACTION WORKDIR [options] [+ ACTION WORKDIR [options] ...]

Initialises JAX's distributed runtime (gloo, 127.0.0.1:PORT, N processes)
and does each ACTION in turn (``+`` separates them: one launch of NetKet
serves several cases that need no fresh process), with a driver built the
same way on every process (fixed seeds, tests/builders.py; VMC: 12 chains
so that 1, 2, 3 and 4 processes split them evenly):

    straight DRIVER STEPS        run STEPS steps (TDVP: STEPS * dt)
    save DRIVER K FILE           run K steps, nkserde.save(driver, FILE)
    resume DRIVER K STEPS FILE   load FILE into a fresh driver, run the
                                 remaining STEPS - K steps
    chains FILE [N_CHAINS]       load FILE into a fresh VMC driver (with
                                 N_CHAINS chains), report its chains
    save-numpy FILE / load-numpy FILE
                                 a MetropolisLocalNumpy state: per-process
    mismatch FILE                save a dict whose "replicated" array
                                 differs between processes (must fail)
    state-dict                   from_state_dict(fresh VMC, state_dict(VMC
                                 after 1 step)) in memory; rank-<r>.npz:
                                 whether the chains came back
    peer-dies WHEN FILE          save a VMC driver to FILE; then process 1
                                 dies (SIGKILL) before the next save
                                 (``before``) or while writing its blocks
                                 (``writing``) and the others save again;
                                 rank-<r>.npz: the error, the seconds it
                                 took, whether FILE still verifies
    count STEPS EVERY            a checkpointed VMC (synchronous saves every
                                 EVERY steps); rank-<r>.npz: this process's
                                 requests to the coordination service
                                 before, after each step and after the run
    own-blocks FILE              save a dict of a 4 MB array split over the
                                 processes and a replicated one, load it
                                 back; rank-<r>.npz: bytes read by the load
    save-fail FILE RANK HOW      save a fresh VMC driver to FILE, then save
                                 it again with process RANK's writes
                                 failing (HOW: ``ENOSPC`` or ``EIO``);
                                 every process writes rank-<r>.npz with the
                                 error it got
    ckpt DRIVER STEPS HOW        ``nkserde.checkpointed(driver,
                                 WORKDIR/ckpt, every=2)``, run STEPS with
                                 ``out=WORKDIR/out/log``. HOW: ``run``;
                                 ``kill:K`` (every process SIGKILLs itself; ``kill1:K``: process 1 only
                                 after step K; synchronous saves);
                                 ``sigterm:K`` (process 1 alone gets SIGTERM
                                 after step K; background saves);
                                 ``stop1:K`` (process 1 stops after step K,
                                 its sockets open, as a node that drops off
                                 the network; SIGKILLed 10 s later)

Process 0 writes WORKDIR/result.npz: the logged losses (``losses``), the
final parameters (``param:<path>``), ``step_count``, the chains gathered
from all processes (``chains``) where the action reports them. Every
process writes WORKDIR/rank-<r>.npz with what only it has.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

rank, n_processes, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
# the actions, each (ACTION, WORKDIR, options); action, workdir and rest are the one being done
ACTIONS, _each = [], []
for _arg in [*sys.argv[4:], "+"]:
    if _arg != "+":
        _each.append(_arg)
    elif _each:
        ACTIONS.append((_each[0], Path(_each[1]), _each[2:]))
        _each = []
action, workdir, rest = ACTIONS[0]

import faulthandler  # noqa: E402

# a hung collective prints every thread's stack before the launcher kills us
# (the clock starts again at each action: multiprocess.TIMEOUT is per action)
STACKS_AFTER = float(os.environ.get("MP_STACKS_AFTER", "200"))
faulthandler.dump_traceback_later(STACKS_AFTER, exit=True)

import jax  # noqa: E402
import persistent_cache  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
if os.environ.get("MP_JAX_CACHE"):
    persistent_cache.use(os.environ["MP_JAX_CACHE"])
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}",
    num_processes=n_processes,
    process_id=rank,
    initialization_timeout=120,
    # JAX's own detection of a process that died (default 100 s)
    heartbeat_timeout_seconds=int(os.environ.get("MP_HEARTBEAT", "100")),
)

import netket as nk  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

import builders  # noqa: E402
import nkserde  # noqa: E402

warnings.simplefilter(
    "ignore",
    nk.errors.InsufficientSamplesForSRWarning if hasattr(nk.errors, "InsufficientSamplesForSRWarning") else UserWarning,
)

N_CHAINS = 12


def vmc(n_chains=N_CHAINS):
    _, hilbert, H = builders.system()
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=n_chains)
    vs = builders.mc_state(sampler=sampler, n_samples=8 * n_chains)
    import optax

    return nk.driver.VMC(H, optax.adam(1e-2), variational_state=vs)


def tdvp():
    import netket.experimental as nkx

    _, hilbert, H = builders.system()
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=N_CHAINS)
    vs = builders.mc_state(sampler=sampler, n_samples=8 * N_CHAINS)
    return nkx.TDVP(H, variational_state=vs, ode_solver=nkx.dynamics.RK4(dt=0.01))


BUILD = {"vmc": vmc, "tdvp": tdvp}


def amount(driver_name, steps):
    return round(steps * 0.01, 10) if driver_name == "tdvp" else steps


def run(driver, driver_name, steps):
    log = nk.logging.RuntimeLog()
    driver.run(amount(driver_name, steps), out=log, show_progress=False)
    data = log.data
    key = "Energy" if "Energy" in data else "Generator"
    return np.asarray(data[key]["Mean"]) if steps else np.zeros(0)


def gathered(x):
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def report(driver, losses=None, **extra):
    out = dict(extra)
    if driver is not None:
        for path, x in jax.tree_util.tree_leaves_with_path(driver.state.parameters):
            out["param:" + jax.tree_util.keystr(path)] = np.asarray(x)
        out["step_count"] = np.asarray(driver.step_count)
        out["chains"] = gathered(driver.state.sampler_state.σ)
        if hasattr(driver, "t"):
            out["t"] = np.asarray(float(driver.t))
    if losses is not None:
        out["losses"] = losses
    if rank == 0:
        np.savez(workdir / "result.npz", **out)


def main():
    global action, workdir, rest
    for action, workdir, rest in ACTIONS:
        faulthandler.dump_traceback_later(STACKS_AFTER, exit=True)
        do_action()


def do_action():
    workdir.mkdir(parents=True, exist_ok=True)
    if action == "straight":
        name, steps = rest[0], int(rest[1])
        driver = BUILD[name]()
        report(driver, run(driver, name, steps))
    elif action == "save":
        name, k, file = rest[0], int(rest[1]), rest[2]
        driver = BUILD[name]()
        losses = run(driver, name, k)
        nkserde.save(driver, file)
        report(driver, losses)
    elif action == "resume":
        name, k, steps, file = rest[0], int(rest[1]), int(rest[2]), rest[3]
        driver = nkserde.load(BUILD[name](), file)
        assert driver.step_count == k, driver.step_count
        report(driver, run(driver, name, steps - k))
    elif action == "chains":
        file = rest[0]
        n_chains = int(rest[1]) if len(rest) > 1 else N_CHAINS
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            driver = nkserde.load(vmc(n_chains), file)
        resized = [str(w.message) for w in caught if "chains" in str(w.message)]
        report(driver, resized=np.asarray(resized or [""]))
    elif action == "save-numpy":
        state = numpy_state()
        state.sample()
        nkserde.save(state.sampler_state, rest[0])
        s = state.sampler_state
        np.savez(workdir / f"rank-{rank}.npz", chains=s.σ, rng=np.asarray(s.rng.integers(0, 2**62, 4)))
    elif action == "load-numpy":
        state = numpy_state()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = nkserde.load(state.sampler_state, rest[0])
        np.savez(
            workdir / f"rank-{rank}.npz",
            chains=s.σ,
            rng=np.asarray(s.rng.integers(0, 2**62, 4)),
            warned=np.asarray([str(w.message) for w in caught] or [""]),
        )
    elif action == "ckpt":
        checkpointed_run(rest[0], int(rest[1]), rest[2])
    elif action == "state-dict":
        driver = vmc()
        run(driver, "vmc", 1)
        restored = nkserde.from_state_dict(vmc(), nkserde.state_dict(driver))
        same = np.array_equal(gathered(restored.state.sampler_state.σ), gathered(driver.state.sampler_state.σ))
        np.savez(workdir / f"rank-{rank}.npz", same=same, step_count=restored.step_count)
    elif action == "peer-dies":
        peer_dies(rest[0], Path(rest[1]))
    elif action == "count":
        count_requests(int(rest[0]), int(rest[1]))
    elif action == "own-blocks":
        own_blocks(rest[0])
    elif action == "save-fail":
        save_failing(Path(rest[0]), int(rest[1]), rest[2])
    elif action == "mismatch":
        nkserde.save({"replicated": np.full(3, float(rank)), "same": np.zeros(2)}, rest[0])
    else:
        raise SystemExit(f"unknown action {action}")
    print(f"done {action} rank {rank}", flush=True)


def own_blocks(file):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(jax.devices(), ("S",))
    host = np.random.default_rng(0).integers(0, 256, (1024, 4096), dtype=np.uint8)  # raw: incompressible
    state = {
        "chains": jax.make_array_from_callback(
            host.shape, NamedSharding(mesh, PartitionSpec("S")), lambda idx: host[idx]
        ),
        "params": np.random.default_rng(1).normal(size=1000),
    }
    nkserde.save(state, file)
    multihost_utils.sync_global_devices("saved")

    def rchar():
        with open("/proc/self/io") as f:
            return int(next(line for line in f if line.startswith("rchar")).split()[1])

    before = rchar()
    loaded = nkserde.load(state, file)
    read = rchar() - before
    same = all(
        np.array_equal(a.data, b.data)
        for a, b in zip(loaded["chains"].addressable_shards, state["chains"].addressable_shards)
    )
    np.savez(
        workdir / f"rank-{rank}.npz",
        read=read,
        same=same,
        size=os.path.getsize(file),
        params=np.array_equal(loaded["params"], state["params"]),
    )


class Interrupt(nk.callbacks.AbstractCallback):
    """After step K (in on_step_end, after the loggers): SIGKILL this process,
    SIGTERM process 1, or SIGSTOP process 1 (killed 10 s later)."""

    kind: str = nk.utils.struct.field(pytree_node=False, serialize=False)
    k: int = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, how):
        self.kind, k = how.split(":")
        self.k = int(k)

    @property
    def callback_order(self) -> int:
        return 1500

    def on_step_end(self, step, log_data, driver):
        if driver.step_count + 1 != self.k:  # NetKet counts the step after this
            return
        if self.kind == "kill" or (self.kind == "kill1" and rank == 1):
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.kind == "sigterm" and rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        elif self.kind == "stop1" and rank == 1:
            subprocess.Popen(["sh", "-c", f"sleep 10; kill -9 {os.getpid()}"], start_new_session=True)
            os.kill(os.getpid(), signal.SIGSTOP)


def checkpointed_run(name, steps, how):
    every = os.environ.get("MP_EVERY", "2")  # steps, or a duration / "auto" (process 0 schedules the saves)
    every = int(every) if every.isdigit() else every
    driver = nkserde.checkpointed(
        BUILD[name](), workdir / "ckpt", every=every, keep=100, async_save=not how.startswith(("kill", "stop"))
    )
    callbacks = [] if how == "run" else [Interrupt(how)]
    exit_status = 0
    try:
        driver.run(amount(name, steps), out=str(workdir / "out" / "log"), callback=callbacks, show_progress=False)
    except SystemExit as stop:  # a signal ends the program once checkpointed (exit 75): noted, not passed on
        exit_status = stop.code
    ckpt = driver.last_checkpoint
    report(
        driver,
        resumed_from=np.asarray(-1 if ckpt.resumed_from is None else ckpt.resumed_from),
        interrupted=np.asarray(str(ckpt.interrupted)),
    )
    np.savez(
        workdir / f"rank-{rank}.npz",
        step_count=driver.step_count,
        interrupted=str(ckpt.interrupted),
        exit_status=exit_status,
    )


class CountRequests(nk.callbacks.AbstractCallback):
    """This process's requests to the coordination service at the end of
    each step (after every callback's on_step_start of that step)."""

    totals: list = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self):
        self.totals = []

    def on_step_end(self, step, log_data, driver):
        self.totals.append(nkserde.processes.jax_service.counts().total)


def count_requests(steps, every):
    """A checkpointed VMC of ``steps`` steps saving every ``every`` (in the
    run's thread); rank-<r>.npz: the request totals before the run, after
    each step and after the run, and the bytes sent and received."""
    import nkserde.processes.jax_service

    before = nkserde.processes.jax_service.counts().total
    driver = nkserde.checkpointed(vmc(), workdir / "ckpt", every=every, async_save=False)
    probe = CountRequests()
    driver.run(steps, callback=[probe], show_progress=False)
    after = nkserde.processes.jax_service.counts()
    np.savez(
        workdir / f"rank-{rank}.npz",
        before=before,
        steps=np.asarray(probe.totals),
        after=after.total,
        sent=after.sent,
        received=after.received,
        step_count=driver.step_count,
    )


def save_failing(file, failing_rank, how):
    """Process ``failing_rank``'s writes fail: process 0 writes through a
    file object, the others with os.pwrite."""
    import errno

    import nkserde.format.together as together

    driver = vmc()
    nkserde.save(driver, file)
    before = file.read_bytes() if rank == 0 else b""
    code = getattr(errno, how)
    if rank == failing_rank:

        def fail(*args, **kwargs):
            raise OSError(code, os.strerror(code))

        if rank == 0:
            real_open = open

            class Failing:
                def __init__(self, f):
                    self.f, self.writes = f, 0

                def write(self, data):
                    self.writes += 1
                    if self.writes == 3:  # after the preamble
                        fail()
                    return self.f.write(data)

                def __getattr__(self, name):
                    return getattr(self.f, name)

            together.open = lambda *a, **k: Failing(real_open(*a, **k))
        else:
            os.pwrite = fail
    try:
        nkserde.save(driver, file)
        error = "no error"
    except nkserde.errors.NkserdeError as exc:
        error = f"{type(exc).__name__}: {exc}"
    multihost_utils.sync_global_devices("after the failed save")
    same = file.read_bytes() == before if rank == 0 else True
    temps = [p.name for p in file.parent.iterdir() if p.name.endswith(".nkserde-tmp")]
    np.savez(
        workdir / f"rank-{rank}.npz",
        error=np.asarray(error),
        unchanged=np.asarray(same),
        temps=np.asarray(temps or [""]),
    )
    nkserde.verify(file)


def peer_dies(when, file):
    import time

    from jax.experimental import multihost_utils

    driver = vmc()
    nkserde.save(driver, file)
    # all meet here, so that on a loaded machine the survivors reach the
    # save together and only process 1 is missing from it
    multihost_utils.sync_global_devices("peer-dies")
    if rank == 1:
        if when == "before":
            os.kill(os.getpid(), signal.SIGKILL)

        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)

        os.pwrite = die  # process 1 writes its blocks with os.pwrite
    start = time.monotonic()
    try:
        nkserde.save(driver, file)
        error, missing = "no error", []
    except nkserde.errors.NkserdeError as exc:
        error, missing = f"{type(exc).__name__}: {exc}", getattr(exc, "missing", [])
    elapsed = time.monotonic() - start
    nkserde.verify(file)  # the previous file, intact
    # process 0 removes the temporary file before its save returns; the others may look before that
    temps = [p.name for p in file.parent.iterdir() if p.name != file.name] if rank == 0 else []
    np.savez(
        workdir / f"rank-{rank}.npz",
        error=np.asarray(error),
        missing=np.asarray(missing or [-1]),
        elapsed=elapsed,
        temps=np.asarray(temps or [""]),
    )
    print(f"done {action} rank {rank}: {error}", flush=True)
    if rank == 0:  # it hosts the coordination service: the others must have written first
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            (workdir / f"rank-{r}.npz").exists() for r in range(n_processes) if r != 1
        ):
            time.sleep(0.1)
    # JAX's shutdown at exit waits for the dead process (until its heartbeat
    # timeout): what happens after the error is not what this tests
    os._exit(0)


def numpy_state():
    _, hilbert, _ = builders.system()
    return builders.mc_state(
        sampler=nk.sampler.MetropolisLocalNumpy(hilbert, n_chains=4 * n_processes), n_samples=32 * n_processes
    )


if __name__ == "__main__":
    main()
