"""What a checkpoint costs a run whose state lives on a GPU or TPU, side by
side with orbax-checkpoint's asynchronous manager and with the physical
limit, in one process.

    python benchmarks/on_device.py [--parts overhead,save,pytree] [--steps 1500] [--repeat 2]
                                   [--pytree-gb 1] [--dir DIR] [--json FILE]

Runs on whatever device JAX picks (``JAX_PLATFORMS`` unset: the chip of a
TPU machine); the CPU works too, for comparison.

* ``overhead``: rbm-100x1000 of benchmarks/checkpoint_overhead.py (10.1M
  float32 parameters, two Adam moments: a checkpoint of ~121 MB), a run of
  ``--steps`` steps from the same state, ``--repeat`` alternating repeats
  of: ``plain``; ``every=100 async`` and ``every=auto async``
  (``nkserde.Checkpoint``); ``orbax every=100``: what an orbax user writes,
  an asynchronous ``CheckpointManager`` saving the parameters and the
  optimizer state every 100 steps from ``on_step_end``, waiting for the
  last at the run's end (not run if orbax-checkpoint is not installed).
  Columns as checkpoint_overhead.py's (fastest repeat; ``wait/ckpt``: the
  time in the Checkpoint's step hooks per checkpoint, median; orbax's
  ``save`` call per checkpoint), and ``dev MB``: the most device memory in
  use at a step start, over the plain run's (``memory_stats``; a
  checkpoint in flight holds the arrays of its snapshot until they are on
  the host).
* ``save``: ``nkserde.save`` of that driver, its arrays fresh from a step
  (nothing copied to the host yet), against the limit: the same arrays to
  the host (``jax.device_get``), then written and fsynced; median of 5.
* ``pytree``: a driver-shaped pytree of ``--pytree-gb`` GB of device arrays
  (benchmarks/save_load.py's, float64), ``nkserde.save`` against
  ``device_get`` + write + fsync, ``nkserde.load`` against read +
  ``device_put``; fresh arrays for every save; median of 3.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
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
from _environment import environment, parent_directory  # noqa: E402

MODEL = "rbm-100x1000"
EVERY = 100
CONFIGS = [
    ("plain", None),
    ("every=100 async", (EVERY, True)),
    ("every=auto async", ("auto", True)),
    ("orbax every=100", "orbax"),
]


def in_use() -> int | None:
    """Device memory in use on the first device (None where JAX says nothing: a CPU)."""
    stats = jax.local_devices()[0].memory_stats()
    return None if not stats else int(stats.get("bytes_in_use", 0))


class MemoryPeak(nk.callbacks.AbstractCallback):
    """The most device memory in use at any step start."""

    peak: int = struct.field(pytree_node=False, serialize=False)

    def __init__(self):
        self.peak = 0

    def on_step_start(self, step, log_data, driver):
        self.peak = max(self.peak, in_use() or 0)


class OrbaxEvery(nk.callbacks.AbstractCallback):
    """An orbax user's checkpoints: the parameters and optimizer state every
    ``every`` completed steps, from ``on_step_end`` (after the update),
    with an asynchronous CheckpointManager; the run's end waits for the last."""

    manager: object = struct.field(pytree_node=False, serialize=False)
    every: int = struct.field(pytree_node=False, serialize=False)
    seconds: list = struct.field(pytree_node=False, serialize=False)

    def __init__(self, directory: Path, every: int):
        import orbax.checkpoint as ocp

        options = ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=True)
        self.manager = ocp.CheckpointManager(directory, options=options)
        self.every, self.seconds = every, []

    def on_step_end(self, step, log_data, driver):
        import orbax.checkpoint as ocp

        completed = driver.step_count + 1
        if completed % self.every == 0:
            started = time.perf_counter()
            state = {"parameters": driver.state.parameters, "optimizer_state": driver._optimizer_state}
            self.manager.save(completed, args=ocp.args.StandardSave(state))
            self.seconds.append(time.perf_counter() - started)

    def on_run_end(self, step, driver):
        self.manager.wait_until_finished()


def overhead(steps: int, repeat: int, parent: Path) -> dict:
    template = co.build(MODEL)
    template.run(2, show_progress=False)  # compile
    template._step_count = 0
    snapshot = nkserde.state_dict(template)

    def fresh():
        return nkserde.from_state_dict(template, snapshot)

    co.timed_run(fresh(), 2, (1, True), parent)  # one-time costs of a first checkpoint
    co.timed_run(fresh(), 2, None, parent)
    import importlib.util

    has_orbax = importlib.util.find_spec("orbax") is not None and importlib.util.find_spec("orbax.checkpoint")
    configs = CONFIGS if has_orbax else [c for c in CONFIGS if c[1] != "orbax"]
    runs: dict = {label: [] for label, _ in configs}
    for r in range(repeat):
        for label, option in configs:
            memory = MemoryPeak()
            if option == "orbax":
                directory = Path(tempfile.mkdtemp(prefix="orbax-", dir=parent))
                orbax = OrbaxEvery(directory, EVERY)
                row = co.timed_run(fresh(), steps, None, parent, extra=[memory, orbax])
                row["saves_in_loop"], row["step_hooks"] = len(orbax.seconds), sum(orbax.seconds)
                shutil.rmtree(directory)
            else:
                row = co.timed_run(fresh(), steps, option, parent, extra=[memory])
            row["device_peak"] = memory.peak
            runs[label].append(row)
            times = f"total {row['total']:7.3f} s loop {row['loop']:7.3f} s"
            print(f"  repeat {r + 1}/{repeat} {label:17s} {times}", flush=True)
    return {"parameters": template.state.n_parameters, "steps": steps, "repeat": repeat, "runs": runs}


def overhead_table(result: dict) -> str:
    runs, steps = result["runs"], result["steps"]
    plain_total, plain_loop = co.best(runs["plain"], "total"), co.best(runs["plain"], "loop")
    plain_peak = max(r["device_peak"] for r in runs["plain"])
    head = (
        f"{'config':17s} {'total s':>8s} {'ovh total':>9s} {'loop s':>8s} {'ovh loop':>8s} {'ckpts':>6s} "
        f"{'wait/ckpt ms':>12s} {'dev MB':>7s} {'lag med/max s':>13s} {'helped':>7s}"
    )
    title = f"{MODEL}, {result['parameters']:,} parameters, {steps} steps, step {plain_loop / steps * 1e3:.2f} ms"
    lines = [title, head]
    for label, rows in runs.items():
        total, loop = co.best(rows, "total"), co.best(rows, "loop")
        peak = max(r["device_peak"] for r in rows)
        line = f"{label:17s} {total:8.3f} "
        if label == "plain":
            lines.append(line + f"{'':>9s} {loop:8.3f}")
            continue
        n = rows[0]["saves_in_loop"]
        wait = statistics.median(r["step_hooks"] for r in rows) / n if n else float("nan")
        lags = [lag for r in rows for lag in r.get("lags", [])]
        lag = f"{statistics.median(x[1] for x in lags):6.3f}/{max(x[1] for x in lags):6.3f}" if lags else ""
        helped = f"{sum(1 for x in lags if x[0])}/{len(lags)}" if lags else ""
        lines.append(
            line + f"{(total - plain_total) / plain_total * 100:8.1f}% {loop:8.3f} "
            f"{(loop - plain_loop) / plain_loop * 100:7.1f}% {n:6d} {wait * 1e3:12.1f} "
            f"{(peak - plain_peak) / 1e6:7.1f} {lag:>13s} {helped:>7s}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------- save, pytree


def write_fsync(arrays, path: Path) -> None:
    with open(path, "wb", buffering=0) as f:
        for a in arrays:
            view = memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
            while view.nbytes:
                view = view[f.write(view) :]
        os.fsync(f.fileno())


def device_arrays(tree) -> list:
    """The JAX arrays of ``tree`` (a key array as its data)."""
    leaves = [x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)]
    return [jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x for x in leaves]


def driver_arrays(driver) -> list:
    """The arrays a checkpoint of ``driver`` holds: its parameters, optimizer and sampler states."""
    return device_arrays([driver.state.parameters, driver._optimizer_state, driver.state.sampler_state])


def raw_save(arrays, path: Path) -> dict:
    """The limit: every array to the host, then written and fsynced."""
    started = time.perf_counter()
    host = jax.device_get(arrays)
    copied = time.perf_counter()
    write_fsync(host, path)
    return {"device_get": copied - started, "write_fsync": time.perf_counter() - copied}


def save_vs_limit(parent: Path, repeat: int = 5) -> dict:
    driver = co.build(MODEL)
    driver.run(2, show_progress=False)
    times: dict = {"nkserde.save": [], "device_get": [], "write_fsync": [], "limit": []}
    for _ in range(repeat):
        driver.run(1, show_progress=False)  # fresh arrays: nothing on the host yet
        jax.block_until_ready(driver.state.parameters)
        started = time.perf_counter()
        nkserde.save(driver, parent / "driver.nks")
        times["nkserde.save"].append(time.perf_counter() - started)
        driver.run(1, show_progress=False)
        jax.block_until_ready(driver.state.parameters)
        raw = raw_save(driver_arrays(driver), parent / "driver.raw")
        times["device_get"].append(raw["device_get"])
        times["write_fsync"].append(raw["write_fsync"])
        times["limit"].append(raw["device_get"] + raw["write_fsync"])
    return {k: statistics.median(v) for k, v in times.items()} | {"bytes": (parent / "driver.raw").stat().st_size}


def pytree(parent: Path, gb: float, repeat: int = 3) -> dict:
    import save_load

    state = save_load.build_state(int(gb * 1e9))
    times: dict = {"nkserde.save": [], "limit save": [], "nkserde.load": [], "limit load": []}
    nks, raw = parent / "pytree.nks", parent / "pytree.raw"
    for _ in range(repeat):
        state = jax.block_until_ready(jax.tree.map(lambda x: x + 0 if isinstance(x, jax.Array) else x, state))
        started = time.perf_counter()
        nkserde.save(state, nks)
        times["nkserde.save"].append(time.perf_counter() - started)
        state = jax.block_until_ready(jax.tree.map(lambda x: x + 0 if isinstance(x, jax.Array) else x, state))
        times["limit save"].append(sum(raw_save(device_arrays(state), raw).values()))
        started = time.perf_counter()
        jax.block_until_ready(nkserde.load(state, nks))
        times["nkserde.load"].append(time.perf_counter() - started)
        started = time.perf_counter()
        host = save_load.raw_load(raw, state)
        leaves = [x for x in jax.tree.leaves(state) if isinstance(x, jax.Array)]
        jax.block_until_ready([jax.device_put(h.view(x.dtype).reshape(x.shape)) for h, x in zip(host, leaves)])
        times["limit load"].append(time.perf_counter() - started)
    return {k: statistics.median(v) for k, v in times.items()} | {"bytes": raw.stat().st_size}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default="overhead,save,pytree", help="comma-separated: overhead, save, pytree")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--repeat", type=int, default=2, help="alternating repeats of the overhead's runs")
    p.add_argument("--pytree-gb", type=float, default=1.0)
    p.add_argument("--dir", default=None, help="where the files go (default: see benchmarks/_environment.py)")
    p.add_argument("--json", default=None, help="results file (default benchmarks/results/on_device-<date>.json)")
    args = p.parse_args(argv)
    parent = Path(tempfile.mkdtemp(prefix="on-device-", dir=parent_directory(args.dir)))
    env = environment(parent) | {"device": str(jax.devices()[0]), "platform": jax.default_backend()}
    print(f"{env}\ncommand: {' '.join(sys.argv)}", flush=True)
    results: dict = {}
    try:
        parts = args.parts.split(",")
        if "overhead" in parts:
            results["overhead"] = overhead(args.steps, args.repeat, parent)
            print("\n" + overhead_table(results["overhead"]), flush=True)
        if "save" in parts:
            s = results["save"] = save_vs_limit(parent)
            print(
                f"\nsave of the {MODEL} driver ({s['bytes'] / 1e6:.0f} MB), median of 5: nkserde.save "
                f"{s['nkserde.save'] * 1e3:.1f} ms; limit {s['limit'] * 1e3:.1f} ms (device_get "
                f"{s['device_get'] * 1e3:.1f} + write+fsync {s['write_fsync'] * 1e3:.1f}); "
                f"{s['nkserde.save'] / s['limit']:.2f}x the limit",
                flush=True,
            )
        if "pytree" in parts:
            t = results["pytree"] = pytree(parent, args.pytree_gb)
            print(
                f"\n{t['bytes'] / 1e9:.2f} GB pytree, median of 3: save {t['nkserde.save']:.3f} s against "
                f"{t['limit save']:.3f} s ({t['nkserde.save'] / t['limit save']:.2f}x); load "
                f"{t['nkserde.load']:.3f} s against {t['limit load']:.3f} s "
                f"({t['nkserde.load'] / t['limit load']:.2f}x)",
                flush=True,
            )
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    env["loadavg_after"] = os.getloadavg()
    out = Path(args.json) if args.json else HERE / "results" / f"on_device-{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": env, "command": sys.argv, "results": results}, indent=1, default=str))
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
