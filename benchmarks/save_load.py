"""Save/load benchmark: nkserde against the raw-I/O limit, flax msgpack,
orbax-checkpoint, pickle and (for variational states) nqxpack.

    python benchmarks/save_load.py [--sizes 10MB,100MB,1GB] [--repeat 3] [--dir DIR]

What is measured, for each state size, in one process and one run:

* a driver-shaped state: ``{"parameters", "adam_mu", "adam_nu"}`` (dense
  layers of float64 random normals, three copies of the same shapes),
  ``"chains"`` (int8 +-1, ~0.5% of the bytes) and ``"step"`` (a Python int);
* save time (including fsync: every method's file is on disk when its save
  is timed as finished) and load time (until the arrays are ready), median
  of ``--repeat`` runs; within each repeat the methods alternate, each saving
  then loading, in an order rotated from repeat to repeat;
* ``nkserde-serial`` (only with ``--methods``): nkserde with the checksum
  of each array computed before its writes, in the same thread, as before
  the checksum overlapped the writes (the same file bytes);
* ``raw``: the same array bytes written array by array to one file + fsync,
  and read back with ``readinto`` into freshly allocated (untouched) numpy
  buffers: the limit for a format that stores the bytes as they are;
* loads are from the page cache (the file was just written; dropping the
  cache needs root), so load numbers are memory/syscall bound, not disk bound;
* peak extra memory (RSS) during save, in a child process per method;
* an nk.vqs.MCState (RBM with ~size/8 float64 parameters): nqxpack against
  nkserde (and raw on nkserde's arrays);
* checksum and codec micro-benchmarks behind nkserde's choices.

GB, MB are decimal (1e9, 1e6 bytes); MiB is 2**20. GB/s is the state's array
bytes divided by the time, whatever the file size.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import pickle
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_PARENT = Path("/work/bench-tmp")
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
CHAINS_FRACTION = 0.005
MIB = 2**20


# --------------------------------------------------------------------------- helpers


def parse_size(text: str) -> int:
    t = text.strip().upper()
    for unit in sorted(UNITS, key=len, reverse=True):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * UNITS[unit])
    return int(float(t))


def fmt_size(n: int) -> str:
    if n >= 10**9:
        return f"{n / 1e9:g}GB"
    if n >= 10**6:
        return f"{n / 1e6:g}MB"
    return f"{n / 1e3:g}KB"


def fsync_file(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """fsync every file and directory under ``path`` (and ``path``'s parent)."""
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            for name in files:
                fsync_file(os.path.join(root, name))
            fsync_file(root)
    else:
        fsync_file(path)
    fsync_file(path.parent)


def disk_size(path: Path) -> int:
    if path.is_dir():
        return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
    return path.stat().st_size


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def array_leaves(tree) -> list[np.ndarray]:
    """The tree's arrays as numpy views (zero-copy for CPU jax arrays)."""
    return [np.asarray(x) for x in jax.tree.leaves(tree) if isinstance(x, (jax.Array, np.ndarray))]


def block(tree):
    return jax.block_until_ready(tree)


def median(xs):
    return statistics.median(xs)


# --------------------------------------------------------------------------- the state


def _dense_layout(param_bytes: float, n_sites: int) -> list[tuple[str, tuple[int, ...]]]:
    """Four dense layers (n_sites -> h -> h -> h -> 1) whose float64 kernels
    and biases take about ``param_bytes``."""
    # elements: n*h + h + 2*(h*h + h) + h + 1 = 2h^2 + (n + 4)h + 1
    a, b, c = 2.0, n_sites + 4.0, 1.0 - param_bytes / 8.0
    h = max(1, int(round((-b + (b * b - 4 * a * c) ** 0.5) / (2 * a))))
    return [
        ("Dense_0", (n_sites, h)),
        ("Dense_1", (h, h)),
        ("Dense_2", (h, h)),
        ("Dense_3", (h, 1)),
    ]


def state_layout(nbytes: int) -> dict:
    chain_bytes = CHAINS_FRACTION * nbytes
    n_sites = max(8, int(round((chain_bytes / 20) ** 0.5)))
    n_chains = max(1, int(round(chain_bytes / n_sites)))
    layers = _dense_layout((nbytes - n_chains * n_sites) / 3, n_sites)
    return {"n_sites": n_sites, "n_chains": n_chains, "layers": layers}


def build_state(nbytes: int, seed: int = 0) -> dict:
    """A driver-shaped state of about ``nbytes`` bytes of jax arrays."""
    lay = state_layout(nbytes)
    rng = np.random.default_rng(seed)

    def normal(shape):
        host = rng.standard_normal(shape)
        out = jax.device_put(host)
        del host
        return out

    def params():
        return {name: {"kernel": normal(shape), "bias": normal((shape[1],))} for name, shape in lay["layers"]}

    state = {"parameters": params(), "adam_mu": params(), "adam_nu": params()}
    spins = (rng.integers(0, 2, size=(lay["n_chains"], lay["n_sites"]), dtype=np.int8) * 2 - 1).astype(np.int8)
    state["chains"] = jax.device_put(spins)
    state["step"] = 12345
    return block(state)


def describe_state(state) -> dict:
    def mb(t):
        return sum(a.nbytes for a in array_leaves(t)) / 1e6

    k0 = state["parameters"]["Dense_1"]["kernel"].shape
    return {
        "bytes": sum(a.nbytes for a in array_leaves(state)),
        "n_arrays": len(array_leaves(state)),
        "parameters_MB": mb(state["parameters"]),
        "adam_mu_MB": mb(state["adam_mu"]),
        "adam_nu_MB": mb(state["adam_nu"]),
        "chains_MB": mb(state["chains"]),
        "chains_shape": list(state["chains"].shape),
        "hidden_kernel_shape": list(k0),
    }


# --------------------------------------------------------------------------- methods
#
# Each method: save(state, stem) -> path on disk (fsynced); load(path, template)
# -> loaded object with ready arrays.


def raw_save(state, stem: Path) -> Path:
    path = stem.with_suffix(".raw")
    with open(path, "wb", buffering=0) as f:
        for a in array_leaves(state):
            view = memoryview(a.reshape(-1).view(np.uint8))
            while view.nbytes:
                n = f.write(view)
                view = view[n:]
        os.fsync(f.fileno())
    return path


def raw_load(path: Path, template):
    # Fresh, untouched buffers: first-touch page faults are part of any load.
    bufs = [np.empty(a.nbytes, np.uint8) for a in array_leaves(template)]
    with open(path, "rb", buffering=0) as f:
        for buf in bufs:
            view, filled = memoryview(buf), 0
            while filled < buf.nbytes:
                n = f.readinto(view[filled:])
                if not n:
                    raise EOFError(path)
                filled += n
    return bufs


def nkserde_save(state, stem: Path) -> Path:
    import nkserde

    return nkserde.save(state, stem.with_suffix(".nks"))


def nkserde_serial_save(state, stem: Path) -> Path:
    """nkserde's save with the checksum computed before the writes, in the
    writing thread (as before issue 9): the same file bytes."""
    import nkserde
    from nkserde.format import array_write

    saved, array_write.PARALLEL_CHECKSUM = array_write.PARALLEL_CHECKSUM, 1 << 62
    try:
        return nkserde.save(state, stem.with_suffix(".nks"))
    finally:
        array_write.PARALLEL_CHECKSUM = saved


def nkserde_load(path: Path, template):
    import nkserde

    return block(nkserde.load(template, path))


def flax_save(state, stem: Path) -> Path:
    from flax import serialization

    path = stem.with_suffix(".msgpack")
    data = serialization.to_bytes(state)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return path


def flax_load(path: Path, template):
    from flax import serialization

    with open(path, "rb") as f:
        data = f.read()
    return block(serialization.from_bytes(template, data))


def pickle_save(state, stem: Path) -> Path:
    path = stem.with_suffix(".pkl")
    host = jax.tree.map(lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, state)
    with open(path, "wb") as f:
        pickle.dump(host, f, protocol=5)
        f.flush()
        os.fsync(f.fileno())
    return path


def pickle_load(path: Path, template):
    with open(path, "rb") as f:
        return pickle.load(f)


_ORBAX = {}


def _orbax():
    if "ckptr" not in _ORBAX:
        import absl.logging
        import orbax.checkpoint as ocp

        absl.logging.set_verbosity(absl.logging.ERROR)
        _ORBAX["ocp"] = ocp
        _ORBAX["ckptr"] = ocp.StandardCheckpointer()
        _ORBAX["n"] = 0
    return _ORBAX


def orbax_save(state, stem: Path) -> Path:
    o = _orbax()
    o["n"] += 1
    path = stem.parent / f"{stem.name}.orbax{o['n']}"  # orbax refuses an existing directory
    o["ckptr"].save(path, state)
    o["ckptr"].wait_until_finished()
    fsync_tree(path)
    return path


def orbax_load(path: Path, template):
    o = _orbax()
    abstract = jax.tree.map(o["ocp"].utils.to_shape_dtype_struct, template)
    return block(o["ckptr"].restore(path, abstract))


def nqxpack_save(vstate, stem: Path) -> Path:
    import nqxpack

    path = stem.with_suffix(".nk")
    nqxpack.save(vstate, path)
    fsync_tree(path)  # nqxpack closes the zip without fsync
    return path


def nqxpack_load(path: Path, template):
    import nqxpack

    out = nqxpack.load(path)
    block(out.variables)
    return out


def nkserde_mc_load(path: Path, template):
    import nkserde

    out = nkserde.load(template, path)
    block((out.variables, out.sampler_state))
    return out


def mc_raw_save(vstate, stem: Path) -> Path:
    import nkserde

    return raw_save(nkserde.state_dict(vstate), stem)


def mc_raw_load(path: Path, template):
    import nkserde

    return raw_load(path, nkserde.state_dict(template))


METHODS = {
    "raw": (raw_save, raw_load),
    "nkserde": (nkserde_save, nkserde_load),
    "nkserde-serial": (nkserde_serial_save, nkserde_load),
    "flax": (flax_save, flax_load),
    "orbax": (orbax_save, orbax_load),
    "pickle": (pickle_save, pickle_load),
}
MC_METHODS = {
    "raw": (mc_raw_save, mc_raw_load),
    "nkserde": (nkserde_save, nkserde_mc_load),
    "nqxpack": (nqxpack_save, nqxpack_load),
}
MEMORY_METHODS = ("raw", "nkserde", "flax", "pickle")


# --------------------------------------------------------------------------- timing loop


def run_methods(methods: dict, obj, nbytes: int, workdir: Path, tag: str, repeat: int) -> dict:
    names = list(methods)
    times = {m: {"save": [], "load": [], "file_bytes": None} for m in names}
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for m in order:
            save, load = methods[m]
            gc.collect()
            t0 = time.perf_counter()
            path = save(obj, workdir / f"{tag}-{m}-r{r}")
            t1 = time.perf_counter()
            times[m]["file_bytes"] = disk_size(path)
            gc.collect()
            t2 = time.perf_counter()
            out = load(path, obj)
            t3 = time.perf_counter()
            del out
            remove(path)
            gc.collect()
            times[m]["save"].append(t1 - t0)
            times[m]["load"].append(t3 - t2)
            print(
                f"    [{tag} repeat {r + 1}/{repeat}] {m:8s} save {t1 - t0:8.3f} s   load {t3 - t2:8.3f} s", flush=True
            )
    rows = {}
    raw_save_t = median(times["raw"]["save"]) if "raw" in times else None
    raw_load_t = median(times["raw"]["load"]) if "raw" in times else None
    for m in names:
        s, ld = median(times[m]["save"]), median(times[m]["load"])
        rows[m] = {
            "save_s": s,
            "save_GBps": nbytes / s / 1e9,
            "save_x_raw": raw_save_t / s if raw_save_t else None,
            "load_s": ld,
            "load_GBps": nbytes / ld / 1e9,
            "load_x_raw": raw_load_t / ld if raw_load_t else None,
            "file_MB": times[m]["file_bytes"] / 1e6,
            "save_all_s": times[m]["save"],
            "load_all_s": times[m]["load"],
        }
    return rows


def print_table(rows: dict) -> None:
    head = (
        f"  {'method':9s} {'save s':>9s} {'save GB/s':>10s} {'save/raw':>9s} "
        f"{'load s':>9s} {'load GB/s':>10s} {'load/raw':>9s} {'file MB':>10s}"
    )
    print(head)
    print("  " + "-" * (len(head) - 2))
    for m, r in rows.items():
        print(
            f"  {m:9s} {r['save_s']:9.3f} {r['save_GBps']:10.3f} {r['save_x_raw']:9.2f} "
            f"{r['load_s']:9.3f} {r['load_GBps']:10.3f} {r['load_x_raw']:9.2f} {r['file_MB']:10.2f}"
        )
    print("  (x/raw = raw time / method time: 1.00 = as fast as raw I/O, 0.50 = twice as slow)")


# --------------------------------------------------------------------------- memory (child process)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def memory_child(method: str, nbytes: int, workdir: Path) -> dict:
    import psutil

    save, _ = METHODS[method]
    # warm up: imports, lazy initialisation, first-call allocations
    small = build_state(1 << 20, seed=1)
    remove(save(small, workdir / f"mem-warm-{method}"))
    del small
    state = build_state(nbytes)
    size = sum(a.nbytes for a in array_leaves(state))
    gc.collect()
    proc = psutil.Process()
    samples = []
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append(proc.memory_info().rss)
            time.sleep(0.002)

    hwm_ok = _reset_hwm()
    before = proc.memory_info().rss
    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    t0 = time.perf_counter()
    path = save(state, workdir / f"mem-{method}")
    elapsed = time.perf_counter() - t0
    stop.set()
    thread.join()
    hwm = _hwm() if hwm_ok else None
    remove(path)
    peak_sampled = max(samples + [before])
    peak = max(peak_sampled, hwm or 0)
    return {
        "method": method,
        "state_bytes": size,
        "rss_before_MiB": before / MIB,
        "peak_sampled_extra_MiB": (peak_sampled - before) / MIB,
        "peak_hwm_extra_MiB": (hwm - before) / MIB if hwm else None,
        "peak_extra_MiB": (peak - before) / MIB,
        "peak_extra_pct": 100 * (peak - before) / size,
        "n_samples": len(samples),
        "save_s": elapsed,
    }


def measure_memory(method: str, nbytes: int, workdir: Path) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_memory-child",
        method,
        "--sizes",
        str(nbytes),
        "--dir",
        str(workdir),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"method": method, "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- MCState


def mc_layout(nbytes: int) -> tuple[int, float]:
    """(n_sites, alpha) of an RBM with about nbytes/8 parameters."""
    n_params = nbytes / 8
    n_sites = max(4, int(round(n_params ** (1 / 3))))
    return n_sites, (n_params - n_sites) / (n_sites * (n_sites + 1))


def build_mcstate(nbytes: int):
    import netket as nk

    n_sites, alpha = mc_layout(nbytes)
    hi = nk.hilbert.Spin(0.5, n_sites)
    vs = nk.vqs.MCState(
        nk.sampler.MetropolisLocal(hi, n_chains=16), nk.models.RBM(alpha=alpha), n_samples=512, seed=0, sampler_seed=1
    )
    block((vs.variables, vs.sampler_state))
    return vs, {"n_sites": n_sites, "alpha": alpha, "n_parameters": int(vs.n_parameters)}


# --------------------------------------------------------------------------- micro-benchmarks


def _best_of(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return median(ts), out


def micro_benchmarks(chains_by_size: dict, repeat: int) -> dict:
    import xxhash
    import zstandard

    from nkserde.format import codecs

    state = build_state(100 * 10**6)
    arrays = [a.reshape(-1).view(np.uint8) for a in array_leaves(state)]
    n = sum(a.nbytes for a in arrays)
    out = {"state_bytes": n}

    def xxh():
        return [xxhash.xxh3_64_intdigest(a) for a in arrays]

    def crc():
        c = 0
        for a in arrays:
            c = zlib.crc32(a, c)
        return c

    def memcpy():
        for a in arrays:
            dst = np.empty_like(a)
            np.copyto(dst, a)

    for name, fn in (("xxh3_64", xxh), ("crc32", crc), ("memcpy_fresh_buffer", memcpy)):
        t, _ = _best_of(fn, max(repeat, 5))
        out[name] = {"s": t, "GBps": n / t / 1e9}

    kernel = np.asarray(state["parameters"]["Dense_1"]["kernel"]).reshape(-1).view(np.uint8)
    out["zstd1_float64_kernel"] = _zstd_bench(kernel, max(repeat, 3))
    out["zstd1_chains"] = {}
    for label, chains in chains_by_size.items():
        data = np.ascontiguousarray(chains).reshape(-1).view(np.uint8)
        res = _zstd_bench(data, max(repeat, 5))
        res["shape"] = list(chains.shape)
        res["nkserde_codec"] = codecs.choose_codec(memoryview(data))[0]
        out["zstd1_chains"][label] = res
    del state, kernel  # (the timed closures hold arrays until the return)
    _ = zstandard
    return out


def _zstd_bench(data: np.ndarray, repeat: int) -> dict:
    import zstandard

    cctx, dctx = zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()
    tc, frame = _best_of(lambda: cctx.compress(data), repeat)
    td, _ = _best_of(lambda: dctx.decompress(frame, max_output_size=data.nbytes), repeat)
    return {
        "bytes": int(data.nbytes),
        "ratio": len(frame) / data.nbytes,
        "compress_GBps": data.nbytes / tc / 1e9,
        "decompress_GBps": data.nbytes / td / 1e9,
    }


# --------------------------------------------------------------------------- report


def _round(x):
    return x if x is None else round(x, 1)


def check_targets(rows: dict, memory: dict, nbytes: int) -> list[dict]:
    nk_, flax_ = rows["nkserde"], rows.get("flax")
    targets = [
        ("nkserde save >= 0.9x raw save", nk_["save_x_raw"], 0.9, f"{nk_['save_x_raw']:.2f}x"),
        ("nkserde load >= 0.9x raw load", nk_["load_x_raw"], 0.9, f"{nk_['load_x_raw']:.2f}x"),
    ]
    if flax_:
        sx, lx = flax_["save_s"] / nk_["save_s"], flax_["load_s"] / nk_["load_s"]
        targets += [
            ("nkserde save >= 2x faster than flax", sx, 2.0, f"{sx:.2f}x"),
            ("nkserde load >= 2x faster than flax", lx, 2.0, f"{lx:.2f}x"),
        ]
    mem = memory.get("nkserde")
    if mem and "peak_extra_MiB" in mem:
        limit = 0.10 * nbytes / MIB + 64
        targets.append(
            (
                "nkserde peak extra memory <= 10% of state + 64 MiB",
                limit / max(mem["peak_extra_MiB"], 1e-9),
                1.0,
                f"{mem['peak_extra_MiB']:.1f} MiB vs limit {limit:.1f} MiB",
            )
        )
    out = []
    for name, value, threshold, shown in targets:
        out.append({"target": name, "value": shown, "met": bool(value >= threshold)})
    return out


def environment() -> dict:
    from nkserde.saving.line import installed_version as v

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    import psutil

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_GiB": psutil.virtual_memory().total / 2**30,
        **{
            d: v(d)
            for d in (
                "nkserde",
                "jax",
                "jaxlib",
                "numpy",
                "flax",
                "orbax-checkpoint",
                "nqxpack",
                "netket",
                "msgpack",
                "zstandard",
                "xxhash",
            )
        },
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10MB,100MB,1GB")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None, help=f"parent of the temporary directory (default {DEFAULT_PARENT})")
    p.add_argument(
        "--mcstate-sizes",
        default=None,
        help="sizes for the MCState/nqxpack comparison (default: --sizes; 'none' to skip)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the child-process memory measurements")
    p.add_argument("--no-micro", action="store_true", help="skip checksum/codec micro-benchmarks")
    p.add_argument(
        "--methods",
        default=None,
        help=f"comma-separated subset of {','.join(METHODS)} (default: all but nkserde-serial)",
    )
    p.add_argument("--json", default=None, help="results file (default benchmarks/results/save_load-<date>.json)")
    p.add_argument("--_memory-child", dest="memory_child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, parse_size(args.sizes), Path(args.dir))))
        return 0

    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    mc_spec = args.mcstate_sizes if args.mcstate_sizes is not None else args.sizes
    mc_sizes = [] if mc_spec.lower() == "none" else [parse_size(s) for s in mc_spec.split(",") if s.strip()]

    parent = Path(args.dir) if args.dir else DEFAULT_PARENT
    created_parent = not parent.exists()
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="save_load-", dir=parent))

    env = environment()
    fs = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", str(workdir)], capture_output=True, text=True
    ).stdout.strip()
    env["workdir"], env["filesystem"] = str(workdir), fs
    print(f"# nkserde save/load benchmark  {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"# command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"# {env['cpu']}, {env['cpus']} CPUs, {env['memory_GiB']:.1f} GiB RAM; python {env['python']}")
    print(
        "# "
        + ", ".join(
            f"{d} {env[d]}" for d in ("nkserde", "jax", "numpy", "flax", "orbax-checkpoint", "nqxpack", "netket")
        )
    )
    print(f"# temp dir {workdir} ({fs}); repeats {args.repeat} (median reported), methods alternate")
    print("# NOTE: loads are from the page cache (the file was just written and fsynced; the cache")
    print("#       cannot be dropped without root): they measure memory/syscall speed, not the disk.")
    print("#       Saves include fsync (orbax/nqxpack: an explicit fsync of their files, timed).")
    print("#       raw = the arrays' bytes written array by array + fsync / readinto fresh buffers.")
    print("#       Returned types: nkserde/orbax jax arrays; flax/pickle/raw numpy arrays.")
    sys.stdout.flush()

    results = {
        "environment": env,
        "command": sys.argv,
        "repeat": args.repeat,
        "sizes": {},
        "mcstate": {},
        "micro": None,
    }

    # warm-up: imports, jit, orbax thread pools
    small = build_state(1 << 20, seed=1)
    methods = (
        {m: METHODS[m] for m in args.methods.split(",")}
        if args.methods
        else {m: f for m, f in METHODS.items() if m != "nkserde-serial"}
    )
    run_methods(methods, small, 1 << 20, workdir, "warmup", 1)
    del small
    gc.collect()
    print()

    chains_by_size = {}
    try:
        for nbytes in sizes:
            label = fmt_size(nbytes)
            state = build_state(nbytes)
            info = describe_state(state)
            chains_by_size[label] = np.asarray(state["chains"]).copy()
            print(
                f"=== state {label}: {info['bytes'] / 1e6:.1f} MB in {info['n_arrays']} arrays "
                f"(parameters/adam_mu/adam_nu {info['parameters_MB']:.1f} MB each, float64, hidden kernel "
                f"{info['hidden_kernel_shape']}; chains int8{info['chains_shape']} {info['chains_MB']:.2f} MB; step)",
                flush=True,
            )
            rows = run_methods(methods, state, info["bytes"], workdir, label, args.repeat)
            del state
            gc.collect()
            memory = {}
            if not args.no_memory:
                for m in MEMORY_METHODS:
                    memory[m] = measure_memory(m, nbytes, workdir)
            print(f"\n--- {label} ({info['bytes'] / 1e6:.1f} MB), median of {args.repeat} ---")
            print_table(rows)
            if memory:
                print("  peak extra RSS during save (child process; RSS sampled every 2 ms and VmHWM):")
                for m, r in memory.items():
                    if "error" in r:
                        print(f"    {m:9s} ERROR {r['error'][-300:]}")
                    else:
                        print(
                            f"    {m:9s} {r['peak_extra_MiB']:9.1f} MiB  = {r['peak_extra_pct']:6.1f}% of state "
                            f"(sampled {r['peak_sampled_extra_MiB']:.1f}, HWM "
                            f"{_round(r['peak_hwm_extra_MiB'])} MiB)"
                        )
            targets = check_targets(rows, memory, info["bytes"])
            print("  targets:")
            for t in targets:
                print(f"    [{'met' if t['met'] else 'NOT met':7s}] {t['target']}: {t['value']}")
            print(flush=True)
            results["sizes"][label] = {"state": info, "methods": rows, "memory": memory, "targets": targets}

        for nbytes in mc_sizes:
            label = fmt_size(nbytes)
            print(f"=== MCState ~{label}: building ...", flush=True)
            try:
                t0 = time.perf_counter()
                vs, mc_info = build_mcstate(nbytes)
                mc_info["build_s"] = time.perf_counter() - t0
            except Exception as exc:  # e.g. out of memory: report, go on
                print(f"  could not build an MCState of {label}: {type(exc).__name__}: {exc}")
                results["mcstate"][label] = {"error": repr(exc)}
                continue
            import nkserde

            mc_bytes = sum(a.nbytes for a in array_leaves(nkserde.state_dict(vs)))
            mc_info["bytes"] = mc_bytes
            print(
                f"  RBM n_sites={mc_info['n_sites']} alpha={mc_info['alpha']:.2f}: "
                f"{mc_info['n_parameters']} parameters, {mc_bytes / 1e6:.1f} MB of arrays "
                f"(built in {mc_info['build_s']:.1f} s)",
                flush=True,
            )
            rows = run_methods(MC_METHODS, vs, mc_bytes, workdir, f"mc{label}", args.repeat)
            del vs
            gc.collect()
            print(f"\n--- MCState {label} ({mc_bytes / 1e6:.1f} MB), median of {args.repeat} ---")
            print_table(rows)
            x = (
                rows["nqxpack"]["save_s"] / rows["nkserde"]["save_s"],
                rows["nqxpack"]["load_s"] / rows["nkserde"]["load_s"],
            )
            print(f"  nkserde vs nqxpack: save {x[0]:.1f}x faster, load {x[1]:.1f}x faster\n", flush=True)
            results["mcstate"][label] = {"state": mc_info, "methods": rows}
        skipped = [fmt_size(s) for s in sizes if s not in mc_sizes]
        if skipped:
            print(f"(MCState/nqxpack comparison not run at {', '.join(skipped)})\n")

        if not args.no_micro:
            micro = micro_benchmarks(chains_by_size, args.repeat)
            results["micro"] = micro
            print(f"=== checksum / codec micro-benchmarks (100 MB state, {micro['state_bytes'] / 1e6:.1f} MB) ===")
            for name in ("xxh3_64", "crc32", "memcpy_fresh_buffer"):
                print(f"  {name:20s} {micro[name]['s'] * 1e3:8.1f} ms  {micro[name]['GBps']:6.2f} GB/s")
            print(f"  xxh3_64 / crc32 speed: {micro['xxh3_64']['GBps'] / micro['crc32']['GBps']:.1f}x")
            z = micro["zstd1_float64_kernel"]
            print(
                f"  zstd-1 float64 kernel ({z['bytes'] / 1e6:.1f} MB): ratio {z['ratio']:.3f}, "
                f"compress {z['compress_GBps']:.2f} GB/s, decompress {z['decompress_GBps']:.2f} GB/s"
            )
            for lab, z in micro["zstd1_chains"].items():
                print(
                    f"  zstd-1 int8 chains {lab:6s} {str(z['shape']):14s} ({z['bytes'] / 1e6:.2f} MB): "
                    f"ratio {z['ratio']:.3f}, "
                    f"compress {z['compress_GBps']:.2f} GB/s, decompress {z['decompress_GBps']:.2f} GB/s; "
                    f"nkserde stores it as {z['nkserde_codec']}"
                )
            print()
    finally:
        if _ORBAX.get("ckptr") is not None:
            _ORBAX["ckptr"].close()
        shutil.rmtree(workdir, ignore_errors=True)
        if created_parent:
            try:
                parent.rmdir()
            except OSError:
                pass

    # summary of targets
    print("=== targets ===")
    for label, r in results["sizes"].items():
        for t in r["targets"]:
            print(f"  {label:6s} [{'met' if t['met'] else 'NOT met':7s}] {t['target']}: {t['value']}")

    out = Path(args.json) if args.json else HERE / "results" / f"save_load-{datetime.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nresults written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
