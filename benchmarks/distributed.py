"""Saving from several JAX processes: nkserde's one shared file against what
a user does without it, and against the raw-write limit.

    python benchmarks/distributed.py --processes 1,2,4 --params-mb 200 --chains-mb 64 --repeat 3
                                     [--n-sites 1000] [--out benchmarks/results/distributed.json]
                                     [--dir /work/bench-tmp] [--timeout 1800]

The script is both the launcher and the worker. For each N in
``--processes`` it starts N processes of itself on this machine (JAX over
gloo on 127.0.0.1, one CPU device each, ``jax.distributed.initialize``).
Every process builds the same GLOBAL state, whatever N (deterministic
seeds; MB = 1e6 bytes):

* ``params``: float64 random normals, ``--params-mb`` MB, fully replicated;
* ``opt``: float64 random normals of the same size (like Adam moments),
  fully replicated;
* ``chains``: int8 +-1 of shape [n_chains, ``--n-sites``], ``--chains-mb``
  MB in total, sharded along axis 0 over the processes (n_chains is a
  multiple of 4);
* ``log_prob``: float64 [n_chains], sharded the same way.

Two ways of saving it to one file, timed after a barrier, on every process:

* ``nkserde``: every process calls ``nkserde.save(state, path)`` with the
  same path; process 0 writes the replicated arrays, each process writes its
  own blocks of the sharded ones into the shared file, nothing is gathered;
* ``naive``: every process ``multihost_utils.process_allgather``s (tiled)
  each array that is sharded over processes, ``np.asarray``s its copy of
  the replicated ones, ``flax.serialization.msgpack_serialize``s the dict
  and writes the bytes to its own temporary name, fsyncs it,
  ``os.replace``s it onto the SAME path and fsyncs the directory (every
  process writes the whole file).

Each method is run once untimed (warm-up: imports, the all-gather's
compilation; its files are checked: ``nkserde.verify``, ``info()
["process_count"] == N``, and both files' contents against the state), then
``--repeat`` times, alternating, each time to a new file name that is
deleted afterwards. Per save and process: the wall time of the call, and
the peak extra memory: a thread samples this process's RSS every 2 ms
(peak minus the RSS just before the save), and the kernel's peak of the
same process (VmHWM, reset through /proc/self/clear_refs just before the
save) minus the same RSS.

Loads (every run; ``--loads-only`` skips the save timings): every process
loads the checked nkserde file into its state two ways, in one run, and
reports the bytes it read (``rchar`` of /proc/self/io): ``before``, the
whole file read and this process's part kept (what a load did before
issue 9: ``from_state_dict(state, load_state_dict(path))``), and ``after``
(``nkserde.load(state, path)``: the header, the replicated values and the
blocks that overlap the process's own shards). A chains-heavy state shows
the difference: ``--params-mb 5 --chains-mb 200 --loads-only``.

``raw`` is the physical limit: the launcher alone (no other process
running) writes as many random bytes as the nkserde file has, in one file,
and fsyncs it (median of ``--repeat``).

Reported per N (save times are medians over the repeats; "max" is the
slowest process of a repeat, i.e. the time until every process is done;
memory is the largest over the repeats, "others" the largest over processes
1..N-1): file sizes, save times, nkserde/raw and naive/nkserde, peak extra
RSS of process 0 and of the others, sampled and (in parentheses) VmHWM. The
sampler is a Python thread: it cannot run while a C call holds the GIL
(``msgpack.packb`` of the whole state does), so it can miss the peak;
VmHWM cannot. Printed as markdown tables; the full data (every repeat of
every process) goes to ``--out`` as JSON. Workers' output is captured and
shown only if a launch fails or times out.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MB = 10**6
SEED = 20261130
METHODS = ("nkserde", "naive")


# --------------------------------------------------------------------------- the state


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 now (the coordinator of local JAX processes)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layout(params_mb: float, chains_mb: float, n_sites: int) -> dict:
    n_params = int(params_mb * MB) // 8
    n_chains = max(4, round(chains_mb * MB / n_sites / 4) * 4)
    return {"n_params": n_params, "n_chains": n_chains, "n_sites": n_sites}


def host_array(name: str, lay: dict) -> np.ndarray:
    """The global value of one entry of the state, the same on every process."""
    rng = np.random.default_rng([SEED, ["params", "opt", "chains", "log_prob"].index(name)])
    if name in ("params", "opt"):
        return rng.standard_normal(lay["n_params"])
    if name == "chains":
        return rng.integers(0, 2, (lay["n_chains"], lay["n_sites"]), dtype=np.int8) * np.int8(2) - np.int8(1)
    return rng.standard_normal(lay["n_chains"])


def build_state(lay: dict) -> dict:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(jax.devices(), ("S",))
    shardings = {"params": P(), "opt": P(), "chains": P("S"), "log_prob": P("S")}
    state = {}
    for name, spec in shardings.items():
        host = host_array(name, lay)
        state[name] = jax.make_array_from_callback(
            host.shape, NamedSharding(mesh, spec), lambda idx, host=host: np.array(host[idx])
        )
        del host
    jax.block_until_ready(state)
    gc.collect()
    return state


def same_as_global(loaded: dict, lay: dict) -> bool:
    return set(loaded) == {"params", "opt", "chains", "log_prob"} and all(
        np.array_equal(np.asarray(loaded[k]), host_array(k, lay)) for k in loaded
    )


# --------------------------------------------------------------------------- the two ways of saving


def save_nkserde(state: dict, path: Path) -> None:
    import nkserde

    nkserde.save(state, path)


def save_naive(state: dict, path: Path) -> None:
    import jax
    from flax import serialization
    from jax.experimental import multihost_utils

    from nkserde.format.atomic import fsync_directory  # the same directory fsync as nkserde's

    def to_host(x):
        if x.is_fully_addressable:
            return np.asarray(x)
        if x.sharding.is_fully_replicated:  # this process's copy
            return np.asarray(x.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    host = {k: to_host(v) for k, v in state.items()}
    data = serialization.msgpack_serialize(host)
    temp = path.with_name(f".{path.name}.{jax.process_index()}.tmp")
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_directory(path.parent)


SAVES = {"nkserde": save_nkserde, "naive": save_naive}
SUFFIX = {"nkserde": ".nks", "naive": ".msgpack"}


# --------------------------------------------------------------------------- memory


def vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakRSS:
    """Peak RSS of this process while the block runs, sampled every 2 ms by
    a thread; ``extra``: peak minus the RSS on entry. ``hwm_extra``: the
    kernel's peak (VmHWM) minus the same, if it could be reset."""

    def __init__(self, interval: float = 0.002):
        import psutil

        self.process = psutil.Process()
        self.interval = interval
        self.stop = threading.Event()

    def _sample(self):
        while not self.stop.wait(self.interval):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self):
        self.hwm_reset = reset_hwm()
        self.before = self.peak = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)
        self.extra = self.peak - self.before
        hwm = vm_hwm() if self.hwm_reset else None
        self.hwm_extra = None if hwm is None else hwm - self.before
        return False


# --------------------------------------------------------------------------- worker


def worker(args) -> None:
    rank, n, workdir = args.rank, args.n, Path(args.workdir)

    import faulthandler

    # a hung collective prints every thread's stack before the launcher kills us
    faulthandler.dump_traceback_later(max(30.0, args.timeout - 30.0), exit=True)

    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{args.port}", num_processes=n, process_id=rank, initialization_timeout=120
    )
    from flax import serialization
    from jax.experimental.multihost_utils import sync_global_devices

    import nkserde

    lay = layout(args.params_mb, args.chains_mb, args.n_sites)
    t0 = time.perf_counter()
    state = build_state(lay)
    report = {
        "rank": rank,
        "n": n,
        "build_s": time.perf_counter() - t0,
        "records": [],
        "state_bytes": sum(x.nbytes for x in state.values()),
        "local_bytes": sum(s.data.nbytes for x in state.values() for s in x.addressable_shards),
    }
    sync_global_devices("built")

    def one_save(method: str, path: Path) -> dict:
        gc.collect()
        sync_global_devices(f"before {path.name}")
        with PeakRSS() as mem:
            t = time.perf_counter()
            SAVES[method](state, path)
            seconds = time.perf_counter() - t
        sync_global_devices(f"after {path.name}")
        return {
            "method": method,
            "seconds": seconds,
            "rss_before": mem.before,
            "extra_rss": mem.extra,
            "hwm_extra": mem.hwm_extra,
        }

    # warm-up, and the checks of both files (outside any timing)
    checks = {}
    for method in ("nkserde",) if args.loads_only else METHODS:
        path = workdir / f"warmup-{method}{SUFFIX[method]}"
        report["records"].append({**one_save(method, path), "repeat": "warm-up"})
        if rank == 0:
            if method == "nkserde":
                info = nkserde.verify(path)
                checks["nkserde_verify"] = True
                checks["nkserde_process_count"] = info["process_count"]
                if info["process_count"] != n:
                    raise AssertionError(f"info()['process_count'] is {info['process_count']}, not {n}")
                loaded = nkserde.load_state_dict(path)
            else:
                loaded = serialization.msgpack_restore(path.read_bytes())
            checks[f"{method}_contents_equal"] = same_as_global(loaded, lay)
            if not checks[f"{method}_contents_equal"]:
                raise AssertionError(f"{method}: the file does not hold the state")
            del loaded
            report.setdefault("file_bytes", {})[method] = os.path.getsize(path)
        sync_global_devices(f"checked {method}")
        if method == "nkserde":
            report["load_bytes"] = measure_loads(state, path, sync_global_devices)
        if rank == 0:
            path.unlink()
    report["checks"] = checks

    for r in range(0 if args.loads_only else args.repeat):
        order = METHODS[r % 2 :] + METHODS[: r % 2]
        for method in order:
            path = workdir / f"r{r}-{method}{SUFFIX[method]}"
            record = one_save(method, path)
            if rank == 0:
                record["file_bytes"] = os.path.getsize(path)
                path.unlink()
            report["records"].append({**record, "repeat": r})
            sync_global_devices(f"deleted {path.name}")

    (workdir / f"rank-{rank}.json").write_text(json.dumps(report, indent=1))
    print(f"rank {rank} done", flush=True)


def rchar() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar")).split()[1])


LOADS = {  # how a process loads the file into its template (the state it saved)
    # what every load did before issue 9: the whole file read, this process's part kept
    "before": lambda nkserde, state, path: nkserde.from_state_dict(state, nkserde.load_state_dict(path)),
    # the replicated values and the blocks that overlap this process's shards
    "after": lambda nkserde, state, path: nkserde.load(state, path),
}


def measure_loads(state: dict, path: Path, sync) -> dict:
    """Bytes each way of loading reads in this process (rchar of
    /proc/self/io: every byte read by a read syscall, page cache or not),
    after checking that the loaded shards are the saved ones."""
    import jax

    import nkserde

    out = {}
    for how, load in LOADS.items():
        gc.collect()
        sync(f"load {how}")
        before = rchar()
        loaded = jax.block_until_ready(load(nkserde, state, path))
        out[how] = rchar() - before
        for name, x in state.items():
            if not all(
                np.array_equal(a.data, b.data) for a, b in zip(loaded[name].addressable_shards, x.addressable_shards)
            ):
                raise AssertionError(f"load {how}: {name} differs from the saved state")
        del loaded
    sync("loads measured")
    return out


# --------------------------------------------------------------------------- launcher


def launch(n: int, args, workdir: Path) -> list[dict]:
    """Runs ``n`` workers; returns their reports (rank order). Their output
    goes to files, printed only if the group fails or times out."""

    port = free_local_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    common = ["--loads-only"] * args.loads_only + [
        "--params-mb",
        str(args.params_mb),
        "--chains-mb",
        str(args.chains_mb),
        "--n-sites",
        str(args.n_sites),
        "--repeat",
        str(args.repeat),
        "--timeout",
        str(args.timeout),
    ]
    logs = [workdir / f"log-{r}.txt" for r in range(n)]
    procs = []
    for r in range(n):
        with open(logs[r], "wb") as log:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(Path(__file__).resolve()),
                        "--rank",
                        str(r),
                        "--n",
                        str(n),
                        "--port",
                        str(port),
                        "--workdir",
                        str(workdir),
                        *common,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=str(workdir),
                    start_new_session=True,
                )
            )
    deadline = time.monotonic() + args.timeout
    timed_out = False
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)  # each worker leads its own group
        for p in procs:
            p.wait()
    codes = [p.returncode for p in procs]
    if timed_out or any(codes):
        for r, (code, log) in enumerate(zip(codes, logs)):
            print(f"--- process {r} of {n} (exit {code}):\n{log.read_text(errors='replace')[-8000:]}")
        why = f"timed out after {args.timeout} s" if timed_out else f"failed (exit codes {codes})"
        raise SystemExit(f"{n} processes {why}")
    return [json.loads((workdir / f"rank-{r}.json").read_text()) for r in range(n)]


def raw_write(nbytes: int, workdir: Path, repeat: int) -> list[float]:
    """Seconds to write ``nbytes`` random bytes to a new file and fsync it."""
    data = np.random.default_rng(SEED).bytes(nbytes)
    times = []
    for r in range(repeat):
        path = workdir / f"raw-{r}.bin"
        t = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view.nbytes:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        times.append(time.perf_counter() - t)
        path.unlink()
    return times


def summarize(n: int, reports: list[dict], raw_times: list[float]) -> dict:
    timed = [[rec for rec in rep["records"] if rec["repeat"] != "warm-up"] for rep in reports]
    out = {
        "processes": n,
        "raw_write_s": statistics.median(raw_times),
        "raw_write_all_s": raw_times,
        "build_s_max": max(rep["build_s"] for rep in reports),
        "checks": reports[0]["checks"],
    }
    for method in METHODS:
        per_rank = [[rec for rec in recs if rec["method"] == method] for recs in timed]
        repeats = len(per_rank[0])
        slowest = [max(per_rank[r][i]["seconds"] for r in range(n)) for i in range(repeats)]
        others = [rec for recs in per_rank[1:] for rec in recs]

        def peak(records, key):
            values = [rec[key] for rec in records if rec[key] is not None]
            return max(values, default=None)

        out[method] = {
            "file_bytes": per_rank[0][0]["file_bytes"],
            "save_s": statistics.median(slowest),
            "save_s_process0": statistics.median(rec["seconds"] for rec in per_rank[0]),
            "save_all_s_max_over_processes": slowest,
            "extra_rss_process0": peak(per_rank[0], "extra_rss"),
            "extra_rss_others": peak(others, "extra_rss"),
            "hwm_extra_process0": peak(per_rank[0], "hwm_extra"),
            "hwm_extra_others": peak(others, "hwm_extra"),
            "per_process": [
                {
                    "seconds": [rec["seconds"] for rec in recs],
                    "extra_rss": [rec["extra_rss"] for rec in recs],
                    "hwm_extra": [rec["hwm_extra"] for rec in recs],
                    "rss_before": [rec["rss_before"] for rec in recs],
                }
                for recs in per_rank
            ],
        }
    out["nkserde_over_raw"] = out["nkserde"]["save_s"] / out["raw_write_s"]
    out["naive_over_nkserde"] = out["naive"]["save_s"] / out["nkserde"]["save_s"]
    return out


def load_row(n: int, reports: list[dict], lay: dict) -> dict:
    replicated = 2 * lay["n_params"] * 8
    global_bytes = lay["n_chains"] * (lay["n_sites"] + 8)
    own = replicated + global_bytes / n
    row = {
        "processes": n,
        "file_bytes": reports[0]["file_bytes"]["nkserde"],
        "replicated_bytes": replicated,
        "global_bytes": global_bytes,
        "goal_bytes": own * 1.01,
    }
    for how in LOADS:
        per = [rep["load_bytes"][how] for rep in reports]
        row[how] = {"per_process": per, "max": max(per), "max_over_own_part": max(per) / own}
    return row


def print_load_table(rows: list[dict]) -> None:
    def mb(x):
        return f"{x / MB:.1f}"

    print(
        "\nBytes read per process by a load (rchar, MB): before = whole file, after = replicated values\n"
        "+ the blocks overlapping the process's shards; goal = replicated + global/N + 1%\n"
    )
    print("| N | file | replicated | global/N | goal | before max | after per process | after max / own part |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        after = row["after"]
        print(
            f"| {row['processes']} | {mb(row['file_bytes'])} | {mb(row['replicated_bytes'])} "
            f"| {mb(row['global_bytes'] / row['processes'])} | {mb(row['goal_bytes'])} "
            f"| {mb(row['before']['max'])} | {', '.join(mb(b) for b in after['per_process'])} "
            f"| {after['max_over_own_part']:.3f} |"
        )


def print_tables(rows: list[dict]) -> None:
    def mb(x):
        return "-" if x is None else f"{x / MB:.1f}"

    def peaks(method: dict, who: str) -> str:
        sampled, kernel = method["extra_rss_" + who], method["hwm_extra_" + who]
        return "-" if sampled is None else f"{mb(sampled)} ({mb(kernel)})"

    print("\nSave time (s; median of the repeats; max = slowest process, p0 = process 0)\n")
    print(
        "| N | nkserde file MB | naive file MB | raw write s | nkserde s max | nkserde s p0 "
        "| naive s max | naive s p0 | nkserde/raw | naive/nkserde |"
    )
    print("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        k, v = row["nkserde"], row["naive"]
        print(
            f"| {row['processes']} | {mb(k['file_bytes'])} | {mb(v['file_bytes'])} | {row['raw_write_s']:.2f} "
            f"| {k['save_s']:.2f} | {k['save_s_process0']:.2f} | {v['save_s']:.2f} | {v['save_s_process0']:.2f} "
            f"| {row['nkserde_over_raw']:.2f} | {row['naive_over_nkserde']:.2f} |"
        )
    print(
        "\nPeak extra RSS during the save, MB: sampled every 2 ms (kernel VmHWM); largest over the\n"
        "repeats; others = processes 1..N-1\n"
    )
    print("| N | nkserde p0 | nkserde others | naive p0 | naive others |")
    print("|--:|--:|--:|--:|--:|")
    for row in rows:
        k, v = row["nkserde"], row["naive"]
        print(
            f"| {row['processes']} | {peaks(k, 'process0')} | {peaks(k, 'others')} "
            f"| {peaks(v, 'process0')} | {peaks(v, 'others')} |"
        )


def versions() -> dict:
    from nkserde.saving.line import installed_version

    return {d: installed_version(d) for d in ("nkserde", "jax", "jaxlib", "flax", "netket", "numpy", "msgpack")}


def launcher(args) -> None:
    counts = [int(x) for x in args.processes.split(",")]
    lay = layout(args.params_mb, args.chains_mb, args.n_sites)
    for n in counts:
        if lay["n_chains"] % n:
            raise SystemExit(f"{lay['n_chains']} chains cannot be split over {n} processes")
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    state_bytes = 2 * lay["n_params"] * 8 + lay["n_chains"] * (lay["n_sites"] + 8)
    print(
        f"state: params and opt {lay['n_params']} float64 each, chains int8[{lay['n_chains']}, "
        f"{lay['n_sites']}], log_prob float64[{lay['n_chains']}]: {state_bytes / MB:.1f} MB; "
        f"files in {args.dir}",
        flush=True,
    )
    load_before = os.getloadavg()
    rows, load_rows = [], []
    for n in counts:
        workdir = Path(tempfile.mkdtemp(prefix=f"distributed-{n}-", dir=args.dir))
        try:
            t = time.perf_counter()
            reports = launch(n, args, workdir)
            load_rows.append(load_row(n, reports, lay))
            if not args.loads_only:
                raw_times = raw_write(reports[0]["file_bytes"]["nkserde"], workdir, args.repeat)
                rows.append(summarize(n, reports, raw_times))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if not args.loads_only:
            row = rows[-1]
            print(
                f"  N={n}: nkserde {row['nkserde']['save_s']:.2f} s, naive {row['naive']['save_s']:.2f} s, "
                f"raw {row['raw_write_s']:.2f} s  ({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    if rows:
        print_tables(rows)
    print_load_table(load_rows)
    result = {
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "environment": {
            "python": platform.python_version(),
            **versions(),
            "cpus": os.cpu_count(),
            "dir": str(args.dir),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "config": {
            "params_mb": args.params_mb,
            "chains_mb": args.chains_mb,
            "repeat": args.repeat,
            **lay,
            "state_bytes": state_bytes,
        },
        "results": rows,
        "loads": load_rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nload average before {load_before}, after {os.getloadavg()}; written {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", default="1,2,4", help="process counts, comma separated")
    parser.add_argument("--params-mb", type=float, default=200.0, help="size of params (and of opt), MB")
    parser.add_argument("--chains-mb", type=float, default=64.0, help="size of the int8 chains, MB")
    parser.add_argument("--n-sites", type=int, default=1000, help="sites per chain")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--loads-only", action="store_true", help="measure the bytes each process reads when loading, no save timings"
    )
    parser.add_argument("--out", default=str(HERE / "results" / "distributed.json"))
    parser.add_argument("--dir", default="/work/bench-tmp", help="where the files are written")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per group of processes")
    # worker mode (set by the launcher)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is None:
        launcher(args)
    else:
        worker(args)


if __name__ == "__main__":
    main()
