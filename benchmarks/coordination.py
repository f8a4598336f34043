"""What multi-process checkpoints cost in coordination, for P up to 1024:
requests at the coordinator and per process, and the modelled time, per
step and per save; the protocol of nkserde 0.x before issue 18 (all-gathers)
beside the new one (rounds through process 0, a non-blocking stop flag).

    python benchmarks/coordination.py [--processes 2,8,64,256,1024] [--rtt-us 50,500]
                                      [--service-us 20] [--simulate-old-up-to 64]
                                      [--out benchmarks/results/coordination.json]

The new protocol is nkserde's own code (``coordination.Group``,
``coordination.StopFlag``, ``format.writer.write_file_together``) run by P
threads, one per simulated process, against
``SimulatedStore`` (tests/simulated_store.py): an in-process key-value store with a
virtual clock. Each request costs its process one round trip (``--rtt-us``)
and the coordinator ``--service-us`` of serial work (plus 1 ns per byte);
local work adds the thread's CPU time. The modelled time is the slowest
process's clock. A save writes a small VMC-like state (parameters, 4
chains per process spread over the processes, a per-process generator)
into a real temporary file.

The old protocol (``JaxCommunicator.allgather`` as it was at 68d519c: set
own key, P blocking gets, a barrier, delete own key; a step was one
all-gather of the signal flag, a save five, one of them of each process's
1.5 KB description) is simulated against the same store for P up to
``--simulate-old-up-to`` and counted from its formula beyond (the table
says which): P^2 gets per all-gather make a 1024-process simulation take
hours. The formula is checked against the simulation where both exist.

Per step the new protocol reads the stop flag from a thread while the
step runs (``StopFlag(background=True)``): the run's thread waits only if
a step is shorter than that read. The table gives the read's modelled
latency (``step read``) and the run-thread cost measured here of handing
it to the thread and taking its answer (``run thread``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# the checkout, and tests/ for the simulated store (test scaffolding, not
# in the package; fuzz/harness.py imports from tests/ the same way)
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from nkserde.processes.coordination import Group, StopFlag  # noqa: E402
from simulated_store import SimulatedStore, simulate  # noqa: E402
from nkserde.format.writer import write_file_together  # noqa: E402
from nkserde.types.placement import GlobalArray, PerProcess  # noqa: E402

DESCRIPTION_BYTES = 1500  # a small VMC's description in the old protocol (issue 18, measured)
OLD_ALLGATHERS_PER_SAVE = 5


# ----------------------------------------------------------------- the old protocol, as it was


def old_allgather(store, rank, size, key, data: bytes, timeout=60.0):
    store.set(f"{key}/{rank}", data)
    out = [store.get(f"{key}/{r}", timeout) for r in range(size)]
    store.barrier(f"{key}/read", timeout)
    store.delete(f"{key}/{rank}")
    return out


def old_step(size):
    def work(rank, store):
        old_allgather(store, rank, size, "old/signal/0", b"0")

    return work


def old_save(size):
    def work(rank, store):
        for n in range(OLD_ALLGATHERS_PER_SAVE):
            data = bytes(DESCRIPTION_BYTES) if n == 1 else b""
            old_allgather(store, rank, size, f"old/save/{n}", data)

    return work


def old_formula(size, rtt, service, rounds, payload):
    """Requests and modelled time of ``rounds`` all-gathers, from the code:
    per process P+3 requests, P+3 sequential round trips; the coordinator
    serves P(P+3), one after another."""
    per_process = rounds * (size + 3)
    coordinator = size * per_process
    received = rounds * size * payload  # per process
    time_s = rounds * ((size + 3) * rtt + size * (size + 3) * service + size * size * payload * 1e-9)
    return per_process, coordinator, received, time_s


# ----------------------------------------------------------------- the new protocol


def new_step(size):
    def work(rank, store):
        StopFlag(store, "nkserde/stop", background=False).check(10, None)

    return work


def new_save(size, directory: Path):
    path = directory / f"save-{size}.nks"
    meta = {"format_version": 1, "root_type": "dict", "nkserde_version": "bench"}

    def tree(rank):
        return {
            "parameters": {"w": np.arange(1000.0)},
            "chains": GlobalArray(
                shape=(4 * size, 16),
                dtype=np.dtype(np.int8),
                blocks=(((4 * rank, 0), np.ones((4, 16), np.int8)),),
            ),
            "rng": PerProcess(np.arange(4) + rank),
        }

    def work(rank, store):
        write_file_together(path, tree(rank), meta, Group(store, rank, size, "save", timeout=120))

    return work


def run_thread_cost(repeat=2000) -> float:
    """Seconds the run's thread spends per step on a background read of the
    stop flag, against a store that answers at once."""

    class Instant:
        def try_get(self, key):
            return None

    flag = StopFlag(Instant(), "k", background=True)
    flag.check(0, None)
    start = time.perf_counter()
    for step in range(1, repeat + 1):
        flag.check(step, None)
    cost = (time.perf_counter() - start) / repeat
    flag.close()
    return cost


def measure(size, rtt, service, work):
    store = SimulatedStore(size, rtt=rtt, service=service)
    _, counts, store, modelled = simulate(size, work, store)
    return {
        "coordinator_requests": store.counts.total,
        "max_process_requests": max(c.total for c in counts),
        "other_process_requests": counts[-1].total,
        "process0_received_bytes": counts[0].received,
        "other_received_bytes": counts[-1].received,
        "modelled_s": modelled,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", default="2,8,64,256,1024")
    p.add_argument("--rtt-us", default="50,500")
    p.add_argument("--service-us", type=float, default=20.0)
    p.add_argument("--simulate-old-up-to", type=int, default=64)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.processes.split(",")]
    rtts = [float(x) * 1e-6 for x in args.rtt_us.split(",")]
    service = args.service_us * 1e-6
    handoff = run_thread_cost()
    rows = []
    with tempfile.TemporaryDirectory(prefix="nkserde-coordination-") as tmp:
        for rtt in rtts:
            for size in sizes:
                step = measure(size, rtt, service, new_step(size))
                save = measure(size, rtt, service, new_save(size, Path(tmp)))
                if size <= args.simulate_old_up_to:
                    old_s = measure(size, rtt, service, old_step(size))
                    old_v = measure(size, rtt, service, old_save(size))
                    old = {
                        "how": "simulated",
                        "step_coordinator": old_s["coordinator_requests"],
                        "step_process": old_s["max_process_requests"],
                        "step_s": old_s["modelled_s"],
                        "save_coordinator": old_v["coordinator_requests"],
                        "save_process": old_v["max_process_requests"],
                        "save_s": old_v["modelled_s"],
                    }
                    formula = old_formula(size, rtt, service, 1, 1)
                    assert formula[1] == old["step_coordinator"], (formula, old)
                else:
                    fs = old_formula(size, rtt, service, 1, 1)
                    fv = old_formula(size, rtt, service, OLD_ALLGATHERS_PER_SAVE, DESCRIPTION_BYTES / 5)
                    old = {
                        "how": "formula",
                        "step_coordinator": fs[1],
                        "step_process": fs[0],
                        "step_s": fs[3],
                        "save_coordinator": fv[1],
                        "save_process": fv[0],
                        "save_s": fv[3],
                    }
                rows.append({"P": size, "rtt_us": rtt * 1e6, "new_step": step, "new_save": save, "old": old})
                print_row(rows[-1], handoff)
                sys.stdout.flush()
    print(
        f"\nrun thread, per step (new): {handoff * 1e6:.0f} us to hand the stop flag's read to its thread "
        f"and take the answer (measured here); service time at the coordinator: {args.service_us:g} us per request"
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"service_us": args.service_us, "handoff_s": handoff, "rows": rows}))
    return 0


_HEADER_PRINTED = False


def print_row(row, handoff):
    global _HEADER_PRINTED
    if not _HEADER_PRINTED:
        print(
            "| P | RTT | step: requests at coordinator old / new | per process old / new | modelled step old / "
            "new read (run thread) | save: requests at coordinator old / new | per process old / new | "
            "modelled save old / new | old counted by |"
        )
        print("|" + "---|" * 10)
        _HEADER_PRINTED = True
    old, step, save = row["old"], row["new_step"], row["new_save"]
    print(
        f"| {row['P']} | {row['rtt_us']:.0f} us | {old['step_coordinator']:,} / {step['coordinator_requests']:,} "
        f"| {old['step_process']:,} / {step['max_process_requests']} "
        f"| {_t(old['step_s'])} / {_t(step['modelled_s'])} ({handoff * 1e6:.0f} us) "
        f"| {old['save_coordinator']:,} / {save['coordinator_requests']:,} "
        f"| {old['save_process']:,} / {save['max_process_requests']} "
        f"| {_t(old['save_s'])} / {_t(save['modelled_s'])} | {old['how']} |"
    )


def _t(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.1f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


if __name__ == "__main__":
    raise SystemExit(main())
