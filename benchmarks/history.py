"""What a checkpoint costs as logger histories grow: bytes written and
seconds per save at 1k, 10k and 100k logged steps of 6 observables, the
checkpoint layout of before (every history whole in each checkpoint) and
the history log (each checkpoint appends the rows since the previous one),
side by side in one run.

    python benchmarks/history.py [--rows 1000,10000,100000] [--saves 7] [--every 10] [--dir DIR]

For each ``rows``: a VMC run (8-site Ising chain, RBM alpha=1, 512 samples:
the ``rbm-8`` of checkpoint_overhead.py, steps of milliseconds) whose
RuntimeLog already holds ``rows`` steps of 6 scalar observables ``x0``..
``x5`` (made at once, as a long run's would be) and logs them, with the
energy, at every step. ``nkserde.Checkpoint(every=E, async_save=False)``
saves every E steps; the first save (which puts the ``rows`` steps in the
history log, as the run's earlier checkpoints would have) is not timed,
the next ``saves`` are. At each, interleaved:

* ``new``: the Checkpoint's save, timed around it (the payload's state
  dict, the logger stubs and the record, the append, the checkpoint file,
  its verification, retention): the seconds the run stands still for a
  synchronous checkpoint. Bytes: the checkpoint file plus what the history
  log grew by;
* ``old``: the same payload (the same driver and loggers, the loggers
  whole) through the path every checkpoint took before history logs and
  ``nkserde.save`` of a dict takes today: ``save_state_dict`` of its state
  dict to a checkpoint file, then ``verify`` of it. Bytes: that file.

Medians over the saves; the machine may be shared (load average printed).
Results also go to benchmarks/results/history-<date>.json.
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

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import netket as nk
import numpy as np
import optax

import nkserde
from _environment import DEFAULT_PARENT, environment, parent_directory
from nkserde.loading.file_info import verify_steps
from nkserde.saving.line import save_state_dict
from nkserde.saving.snapshot import state_dict
from nkserde.checkpoint_files import directory
from nkserde.checkpoint.persist.saving import payload
from nkserde.format import drain

HERE = Path(__file__).resolve().parent
OBSERVABLES = 6


def build():
    hilbert = nk.hilbert.Spin(0.5, N=8)
    vs = nk.vqs.MCState(
        nk.sampler.MetropolisLocal(hilbert, n_chains=16),
        nk.models.RBM(alpha=1, param_dtype=float),
        n_samples=512,
        seed=0,
        sampler_seed=1,
    )
    hamiltonian = nk.operator.Ising(hilbert, nk.graph.Chain(8), h=1.0)
    return nk.driver.VMC(hamiltonian, optax.adam(1e-2), variational_state=vs)


def long_log(rows: int):
    """A RuntimeLog holding ``rows`` earlier steps (-rows..-1) of the 6 observables."""
    steps = np.arange(-rows, 0)
    state = {
        "@type": "netket.logging.RuntimeLog",
        "@version": 1,
        "last_step": -1,
        "history": [
            {
                "path": [f"x{i}"],
                "columns": {"iters": steps.copy(), "value": np.sin(0.1 * (i + 1) * steps)},
                "main": "value",
                "single": True,
                "keys": ["value"],
            }
            for i in range(OBSERVABLES)
        ],
    }
    return nkserde.from_state_dict(nk.logging.RuntimeLog(), state)


def observables(step, log_data, driver):
    for i in range(OBSERVABLES):
        log_data[f"x{i}"] = float(np.sin(0.1 * (i + 1) * driver.step_count))
    return True


def history_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in directory.history_files(path))


class Measured(nkserde.Checkpoint):
    """nkserde.Checkpoint whose saves are timed, each followed by the same
    payload saved the way checkpoints were before history logs (private
    attributes: only to measure them)."""

    rows: list = nk.utils.struct.field(pytree_node=False, serialize=False)
    old_directory: Path = nk.utils.struct.field(pytree_node=False, serialize=False)

    def __init__(self, path, old_directory, **kwargs):
        super().__init__(path, **kwargs)
        self.rows, self.old_directory = [], Path(old_directory)

    def _save(self, driver, *, asynchronous, stopped=False):
        run = self._run
        before = history_bytes(self.directory)
        start = time.perf_counter()
        super()._save(driver, asynchronous=asynchronous, stopped=stopped)
        self.wait()
        new_seconds = time.perf_counter() - start
        new_bytes = self.path(run.completed).stat().st_size + history_bytes(self.directory) - before
        # the same payload, every logger whole, written and verified as a checkpoint was before
        old = self.old_directory / f"step-{run.completed:010d}.nks"
        start = time.perf_counter()
        state = state_dict(payload(driver, run, run.completed, stopped))
        save_state_dict(state, old, root_type="checkpoint")
        drain(verify_steps(old))
        old_seconds = time.perf_counter() - start
        self.rows.append(
            {"old_bytes": old.stat().st_size, "old_s": old_seconds, "new_bytes": new_bytes, "new_s": new_seconds}
        )
        old.unlink()


def bench(rows: int, saves: int, every: int, parent: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="history-", dir=parent))
    try:
        (work / "old").mkdir()
        ckpt = Measured(work / "ckpt", work / "old", every=every, async_save=False, keep=2)
        driver, log = build(), long_log(rows)
        driver.run((saves + 1) * every, out=log, callback=[observables, ckpt], show_progress=False)
        measured = ckpt.rows[1 : saves + 1]  # the first puts the earlier steps in the log: not timed
        logged = len(log.data["x0"].iters)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "rows": rows,
        "logged_at_the_end": logged,
        "saves": len(measured),
        **{k: statistics.median(r[k] for r in measured) for k in ("old_bytes", "old_s", "new_bytes", "new_s")},
        "each": measured,
    }


def table(results) -> str:
    head = (
        f"{'steps logged':>12s} {'old bytes':>11s} {'old ms':>8s} {'new bytes':>10s} {'new ms':>8s} "
        f"{'bytes old/new':>13s} {'time old/new':>12s}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(
            f"{r['rows']:>12,d} {r['old_bytes']:>11,.0f} {r['old_s'] * 1e3:>8.1f} {r['new_bytes']:>10,.0f} "
            f"{r['new_s'] * 1e3:>8.1f} {r['old_bytes'] / r['new_bytes']:>13.1f} {r['old_s'] / r['new_s']:>12.1f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1000,10000,100000", help="steps the loggers hold (comma-separated)")
    p.add_argument("--saves", type=int, default=7, help="timed saves per size (median)")
    p.add_argument("--every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--dir", default=None, help=f"where to write (default {DEFAULT_PARENT} if it exists, else tmp)")
    p.add_argument("--json", default=None, help="results file (default benchmarks/results/history-<date>.json)")
    args = p.parse_args(argv)
    parent = parent_directory(args.dir)
    env = environment(parent)
    print(f"{env}\ncommand: {' '.join(sys.argv)}", flush=True)
    build().run(2, show_progress=False)  # compile once
    results = []
    for rows in (int(x) for x in args.rows.split(",")):
        results.append(bench(rows, args.saves, args.every, parent))
        r = results[-1]
        print(
            f"{rows:,} steps: old {r['old_bytes']:,.0f} B {r['old_s'] * 1e3:.1f} ms, "
            f"new {r['new_bytes']:,.0f} B {r['new_s'] * 1e3:.1f} ms",
            flush=True,
        )
    env["loadavg_after"] = os.getloadavg()
    print(
        f"\n{OBSERVABLES} observables, a checkpoint every {args.every} steps; medians of {args.saves} saves; "
        f"load average before {env['loadavg_before'][0]:.2f}, after {env['loadavg_after'][0]:.2f}\n"
    )
    print(table(results))
    out = Path(args.json) if args.json else HERE / "results" / f"history-{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"environment": env, "command": sys.argv, "results": results}, indent=1))
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
