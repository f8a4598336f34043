"""One NetKet run in a process of its own, for tests/test_checkpoint_kill.py.

    python _ckpt_script.py DRIVER WORKDIR [--mode MODE] [--every E] [--sync]

DRIVER is ``vmc`` or ``vmc_sr`` (8 steps) or ``tdvp`` (RK4, FullSumState,
``run(0.08)`` with dt=0.01), or ``vmc_monitor``, ``vmc_numpy_complex`` (8
steps; state their first step restructures), built with fixed seeds by
tests/builders.py. With ``--mode plain``, several joined by commas
(``vmc,tdvp``) run one after the other in this process, each in
``WORKDIR/<driver>`` as if it were WORKDIR: the references of several
drivers for the price of one import of NetKet.
MODE is ``checkpointed`` (``nkserde.checkpointed(driver, WORKDIR/ckpt,
...)``), ``callback`` (``callback=nkserde.Checkpoint(WORKDIR/ckpt, ...)``)
or ``plain`` (no checkpoint: the reference). The run logs to
``out="WORKDIR/out/log"`` (NetKet makes a JsonLog of it) and, at the end,
writes the final parameters, step count and time to ``WORKDIR/result.npz``.

It prints, one line each, flushed:
    imported                     once its imports are done
    resumed_from <step|None> params <digest>
                                 when the run starts, after the Checkpoint's
                                 on_run_start: where it resumed, and a
                                 digest of the parameters it starts from
    step <k>                     in on_step_end of step k (k = 1, 2, ...),
                                 after the loggers and the Checkpoint
    writing <file>               see CKPT_SLOW_WRITE
    appending step <k>           see CKPT_SLOW_APPEND
    run_end step_count=<n> params <digest>
                                 in on_run_end, after the Checkpoint's (also
                                 when a signal ends the program: exit 75)
    finished step_count=<n> t=<t> params <digest>
    interrupted <signal name|None>   (the Checkpoint's ``interrupted``)

Environment:
    CKPT_STEP_HOLD=<k>:<file>    after the "step k" line, wait (in on_step_end)
                                 until <file> exists: a signal sent on
                                 reading the line arrives in that step's
                                 end, however loaded the machine.
    CKPT_SLOW_WRITE=<k>:<s>      the write of checkpoint k stops for s seconds
                                 after its data, before the fsync and rename
                                 that publish it (its temporary file exists).
    CKPT_SLOW_APPEND=<k>:<s>     (every=1, a fresh run) the append of step k's
                                 logger rows to the history log writes half
                                 of them (flushed, fsynced), then stops for s
                                 seconds before the rest.
    CKPT_JAX_CACHE=<dir>         JAX persistent compilation cache (only makes
                                 the processes after the first start faster).
    CKPT_RESULT_SAMPLER=1        result.npz also holds the final sampler
                                 state's arrays (``sampler_state...``).
    CKPT_STEP_SECONDS=<s>        sleep s seconds at the end of every step (a
                                 torture's random moments then fall in steps
                                 as often as in the start-up).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

import jax
import persistent_cache

if os.environ.get("CKPT_JAX_CACHE"):
    persistent_cache.use(os.environ["CKPT_JAX_CACHE"])

import netket as nk
import numpy as np

import nkserde
import nkserde.format.writer

import builders  # tests/ is sys.path[0]: this script lives there

print("imported", flush=True)  # a signal before this line meets the interpreter and its C extensions alone

AMOUNT = {"vmc": 8, "vmc_sr": 8, "tdvp": 0.08, "vmc_monitor": 8, "vmc_numpy_complex": 8}
BUILD = {
    "vmc": builders.vmc,
    "vmc_sr": builders.vmc_sr,
    "tdvp": builders.tdvp,
    # state a fresh template holds provisionally (docs/schema.md)
    "vmc_monitor": builders.vmc_monitor,
    "vmc_numpy_complex": builders.vmc_numpy_complex,
}

CHECKPOINT = None  # the run's Checkpoint, once it exists
_STDOUT = threading.Lock()


def say(line: str) -> None:
    """One whole line per write: the async writer thread prints too, and
    print() writes the text and its newline separately, so two threads'
    lines could interleave ("step 5writing ...")."""
    with _STDOUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def checkpoint():
    return CHECKPOINT if isinstance(CHECKPOINT, nkserde.Checkpoint) or CHECKPOINT is None else CHECKPOINT()


def digest(driver) -> str:
    h = hashlib.sha256()
    for x in jax.tree_util.tree_leaves(driver.state.parameters):
        h.update(np.asarray(x).tobytes())
    return h.hexdigest()[:16]


class Printer(nk.callbacks.AbstractCallback):
    """Reports progress on stdout; runs after the Checkpoint and the loggers
    (whatever their orders, up to 1000)."""

    @property
    def callback_order(self) -> int:
        return 1500

    def on_run_start(self, step, driver):
        ckpt = checkpoint()
        say(f"resumed_from {None if ckpt is None else ckpt.resumed_from} params {digest(driver)}")

    def on_run_end(self, step, driver):
        say(f"run_end step_count={driver.step_count} params {digest(driver)}")

    def on_step_end(self, step, log_data, driver):
        # NetKet increments step_count after on_step_end
        say(f"step {driver.step_count + 1}")
        time.sleep(float(os.environ.get("CKPT_STEP_SECONDS", "0")))
        hold = os.environ.get("CKPT_STEP_HOLD")
        if hold and int(hold.split(":")[0]) == driver.step_count + 1:
            # a handshake, not a time window: the test signals this process
            # while it waits here, then creates the file that releases it
            release = Path(hold.split(":", 1)[1])
            deadline = time.monotonic() + 300
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.01)


def slow_down_a_write():
    spec = os.environ.get("CKPT_SLOW_WRITE")
    if not spec:
        return
    step, seconds = spec.split(":")
    name = f"step-{int(step):010d}.nks"
    original = nkserde.format.writer.atomic_write

    @contextlib.contextmanager
    def atomic_write(target):
        with original(target) as f:
            yield f
            if Path(target).name == name:
                f.flush()
                say(f"writing {name}")
                time.sleep(float(seconds))

    nkserde.format.writer.atomic_write = atomic_write


def slow_down_an_append():
    spec = os.environ.get("CKPT_SLOW_APPEND")
    if not spec:
        return
    step, seconds = (int(x) for x in spec.split(":"))
    from nkserde.format import history_log

    original, calls = history_log.append, [1]  # step 1's rows start the log: the append of step k is call k - 1

    def append(path, *, file_id, end, record):
        calls[0] += 1
        if calls[0] != step:
            return original(path, file_id=file_id, end=end, record=record)
        with open(path, "r+b") as f:
            f.seek(end)
            f.write(record.data[: len(record.data) // 2])
            f.flush()
            os.fsync(f.fileno())
        say(f"appending step {step}")
        time.sleep(seconds)
        raise RuntimeError("the append should have been killed")

    history_log.append = append


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("driver", help=f"one of {sorted(BUILD)}; with --mode plain, several joined by commas")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--mode", choices=("checkpointed", "callback", "plain"), default="checkpointed")
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--sync", action="store_true", help="async_save=False")
    args = parser.parse_args()
    drivers = args.driver.split(",")
    if any(name not in BUILD for name in drivers) or (len(drivers) > 1 and args.mode != "plain"):
        parser.error(f"driver: one of {sorted(BUILD)}, or several joined by commas with --mode plain")
    slow_down_a_write()
    slow_down_an_append()
    if len(drivers) == 1:
        run(drivers[0], args.workdir, args)
    else:
        for name in drivers:
            run(name, args.workdir / name, args)


def run(name: str, workdir: Path, args) -> None:
    global CHECKPOINT
    driver = BUILD[name]()
    ckpt_dir = workdir / "ckpt"
    options = {"every": args.every, "async_save": not args.sync}
    callbacks = [Printer()]
    if args.mode == "checkpointed":
        driver = nkserde.checkpointed(driver, ckpt_dir, **options)
        CHECKPOINT = lambda: driver.last_checkpoint  # noqa: E731  (made by run())
    elif args.mode == "callback":
        CHECKPOINT = nkserde.Checkpoint(ckpt_dir, **options)
        callbacks.append(CHECKPOINT)

    driver.run(AMOUNT[name], out=str(workdir / "out" / "log"), callback=callbacks, show_progress=False)

    leaves = jax.tree_util.tree_leaves_with_path(driver.state.parameters)
    arrays = {jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves}
    if os.environ.get("CKPT_RESULT_SAMPLER") and hasattr(driver.state, "sampler_state"):
        for path, x in jax.tree_util.tree_leaves_with_path(driver.state.sampler_state):
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                x = jax.random.key_data(x)
            arrays["sampler_state" + jax.tree_util.keystr(path)] = np.asarray(x)
    t = float(driver.t) if name == "tdvp" else float("nan")
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "result.npz", "wb") as f:
        np.savez(f, step_count=np.asarray(driver.step_count), t=np.asarray(t), **arrays)
    say(f"finished step_count={driver.step_count} t={t!r} params {digest(driver)}")
    ckpt = checkpoint()
    say(f"interrupted {None if ckpt is None else ckpt.interrupted}")


if __name__ == "__main__":
    # Ctrl-C as in a terminal: a job started in the background by a
    # non-interactive shell (CI runners) inherits SIGINT ignored, and Python
    # then installs no KeyboardInterrupt handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
