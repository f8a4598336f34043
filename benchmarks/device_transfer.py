"""What slows a run on a GPU or TPU while a checkpoint's arrays cross to
the host: the copies, the reads, or nkserde.

    python benchmarks/device_transfer.py [--steps 1500] [--repeat 2] [--every 100] [--piece-mb 4 ...] [--modes ...]

The run of benchmarks/checkpoint_overhead.py's ``rbm-100x1000`` (10.1M
float32 parameters and two Adam moments: 121 MB), ``--steps`` steps from the
same state, alternating ``--repeat`` times, every ``--every`` steps (at a
step's start) doing one of:

* ``plain``: nothing;
* ``copy``: ``copy_to_host_async`` of the parameters and optimizer state,
  never read (what the device's transfer alone costs the steps);
* ``copy+read``: the same, then ``np.asarray`` of each in a thread;
* ``read``: ``np.asarray`` of each in a thread, no copy started before;
* ``pieces``: in a thread, each array cut on the device into pieces of
  ``--piece-mb`` MB along its first axis (one run per size given), each
  copied once the one before it is on the host (the steps' own small
  reads wait behind one piece);
* ``nkserde``: ``nkserde.Checkpoint(every=...)`` (asynchronous);
* ``auto``: ``nkserde.Checkpoint(every="auto")``;
* ``hooks``: ``nkserde.Checkpoint(every=10**9)``: its step hooks, no
  checkpoint before the run's end (what the Checkpoint costs the steps
  apart from its checkpoints).

Printed per run: the loop's time (checkpoint_overhead.py's), the time in
the Checkpoint's step hooks, and the most device memory in use, sampled
every 0.5 ms by a thread (``memory_stats``; none on a CPU). Figures on a
TPU v5e: docs/guides/accelerators.md.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import threading
import time
from pathlib import Path

import jax

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checkpoint_overhead as co  # noqa: E402
import netket as nk  # noqa: E402
import numpy as np  # noqa: E402
from netket.utils import struct  # noqa: E402

import nkserde  # noqa: E402
from _environment import parent_directory  # noqa: E402

MODES = ("plain", "copy", "copy+read", "read", "pieces", "nkserde", "auto", "hooks")


def state_arrays(driver) -> list:
    leaves = jax.tree.leaves([driver.state.parameters, driver._optimizer_state])
    return [x for x in leaves if isinstance(x, jax.Array) and x.size > 1000]


@functools.partial(jax.jit, static_argnums=2)
def _rows(x, start, size):
    return jax.lax.dynamic_slice_in_dim(x, start, size, axis=0)


def read_in_pieces(x, piece_bytes: int) -> np.ndarray:
    out = np.empty(x.shape, x.dtype)
    rows = max(1, piece_bytes // max(1, x.nbytes // x.shape[0]))
    for start in range(0, x.shape[0], rows):
        size = min(rows, x.shape[0] - start)
        out[start : start + size] = np.asarray(_rows(x, start, size))
    return out


class Transfer(nk.callbacks.AbstractCallback):
    """Every ``every`` steps, at a step's start: the transfer of ``mode``."""

    mode: str = struct.field(pytree_node=False, serialize=False)
    every: int = struct.field(pytree_node=False, serialize=False)
    piece_bytes: int = struct.field(pytree_node=False, serialize=False)
    threads: list = struct.field(pytree_node=False, serialize=False)
    held: list = struct.field(pytree_node=False, serialize=False)

    def __init__(self, mode: str, every: int, piece_bytes: int):
        self.mode, self.every, self.piece_bytes, self.threads, self.held = mode, every, piece_bytes, [], []

    def on_step_start(self, step, log_data, driver):
        if driver.step_count == 0 or driver.step_count % self.every:
            return
        arrays = state_arrays(driver)
        if self.mode in ("copy", "copy+read"):
            for x in arrays:
                x.copy_to_host_async()
        if self.mode == "copy":
            self.held.append(arrays)
            return
        if self.mode == "pieces":
            work = lambda: [read_in_pieces(x, self.piece_bytes) for x in arrays]  # noqa: E731
        else:
            work = lambda: [np.asarray(x) for x in arrays]  # noqa: E731
        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        self.threads.append(thread)

    def on_run_end(self, step, driver):
        for thread in self.threads:
            thread.join()


class MemoryPeak:
    """The most device memory in use, sampled by a thread every 0.5 ms."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._device = jax.local_devices()[0]
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._stop.is_set():
            stats = self._device.memory_stats() or {}
            self.peak = max(self.peak, stats.get("bytes_in_use", 0))
            time.sleep(0.0005)

    def end(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--piece-mb", type=float, nargs="+", default=[4.0])
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--model", default="rbm-100x1000", help="a model of checkpoint_overhead.py")
    args = p.parse_args(argv)
    parent = Path(tempfile.mkdtemp(prefix="device-transfer-", dir=parent_directory(None)))
    runs = [(m, int(mb * 2**20)) for m in args.modes for mb in (args.piece_mb if m == "pieces" else [0])]
    template = co.build(args.model)
    template.run(2, show_progress=False)
    template._step_count = 0
    snapshot = nkserde.state_dict(template)

    def fresh():
        return nkserde.from_state_dict(template, snapshot)

    print(f"{jax.devices()[0]}; {args.model}, {args.steps} steps, every {args.every}", flush=True)
    co.timed_run(fresh(), 2, (1, True), parent)  # one-time costs
    for mode, piece in runs:  # compiles
        if mode == "pieces":
            co.timed_run(fresh(), args.every + 1, None, parent, extra=[Transfer(mode, args.every, piece)])
    for r in range(args.repeat):
        for mode, piece in runs:
            memory = MemoryPeak()
            if mode == "plain":
                row = co.timed_run(fresh(), args.steps, None, parent)
            elif mode in ("nkserde", "auto", "hooks"):
                every = {"auto": "auto", "hooks": 10**9}.get(mode, args.every)
                row = co.timed_run(fresh(), args.steps, (every, True), parent)
            else:
                row = co.timed_run(fresh(), args.steps, None, parent, extra=[Transfer(mode, args.every, piece)])
            peak = memory.end()
            label = f"pieces {piece / 2**20:g}MB" if mode == "pieces" else mode
            print(
                f"  repeat {r + 1}/{args.repeat} {label:12s} loop {row['loop']:7.3f} s  total {row['total']:7.3f} s  "
                f"hooks {row['step_hooks'] * 1e3:6.1f} ms  device peak {peak / 1e6:8.1f} MB",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
