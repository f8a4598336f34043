"""Power cuts: checkpointed runs on LazyFS (tests/lazyfs.py) whose machine
"loses power" at chosen or random moments, rerun at once on what the disk
then holds, until one run reaches the end. Every chain must end as the run
never interrupted: the same final parameters and sampler state bit for
bit, the same JsonLog (every step logged once, every value); no rerun may
be refused (a lock left by the cut one) or skip a checkpoint on disk (every
one is whole).

Each run is ``tests/_ckpt_script.py`` (an 8-site VMC, 8 steps, a JsonLog)
with everything it writes on the LazyFS mount: the checkpoint directory,
the JsonLog, and nkserde's compilation cache (JAX's executables, numba's
kernels, the fingerprint's probes: ``NKSERDE_COMPILATION_CACHE``). A cut is
either

* a signal cut: the run is killed (SIGKILL) when it prints a line (held
  there: ``CKPT_STEP_HOLD``), then LazyFS drops every unsynced byte; or
* a crash cut: LazyFS kills itself, with its cache, at a chosen system call
  (``lazyfs::crash``: before the rename that publishes a checkpoint, before
  the fsync of a history log's append, after the link that places the
  lock, ...); the run, whose file system is gone, is killed at once.

then LazyFS is mounted again (the reboot) and the run is started again.

    python tests/power_cuts.py --cuts 40 --seed 1      # random cuts; prints the figures

needs root, /dev/fuse and ``NKSERDE_LAZYFS`` (tests/lazyfs.py);
tests/test_power_loss.py runs a fixed short list in CI.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lazyfs import LazyFS, binary
from test_checkpoint_kill import Outcome, Process, Runner, end_differences, resumed_from, saved_steps, step_lines

STEPS = 8
# the two writers, and both ways of turning checkpoints on
WRITERS = {
    "sync": ["--mode", "checkpointed", "--every", "1", "--sync"],
    "async": ["--mode", "callback", "--every", "1"],
}


@dataclass(frozen=True)
class Cut:
    """Where a run loses power: at the line ``hold`` (``"step <k>"``, held
    there, or ``"imported"``/``"resumed_from"``: start-up) by a signal, or
    at a system call by LazyFS (``crash``: timing, op, from regex, to
    regex; the from regex of a rename or link is not checked by LazyFS)."""

    name: str
    hold: str | None = None
    crash: tuple | None = None


def step_hold(k: int) -> Cut:
    return Cut(f"SIGKILL at the end of step {k}", hold=f"step {k}")


def crash(name: str, timing: str, op: str, regex: str, to: str | None = None) -> Cut:
    return Cut(name, crash=(timing, op, regex, to))


def step_file(k: int) -> str:
    return rf"step-{k:010d}\.nks$"


# ------------------------------------------------------------------ a chain


class Chain:
    """Runs of one script in ``workdir`` on the mount, each cut, the last
    one to the end; ``stats`` counts what happened."""

    def __init__(self, fs: LazyFS, runner: Runner, workdir: Path, writer: str, env: dict, cache: Path):
        self.fs, self.runner, self.workdir, self.writer, self.env = fs, runner, workdir, writer, env
        self.cache = cache
        self.workdir.mkdir(parents=True)
        self.stats: Counter = Counter()
        self.previous: Process | None = None  # the last run that was cut

    def _start(self, env=None) -> Process:
        process = self.runner.start("vmc", self.workdir, *WRITERS[self.writer], env={**self.env, **(env or {})})
        self.stats["runs"] += 1
        return process

    def run_cut(self, cut: Cut) -> bool:
        """One run, cut as ``cut`` says; False if it reached the end first
        (the call never came: a missed cut)."""
        on_disk = saved_steps(self.workdir)
        env = {}
        if cut.hold and cut.hold.startswith("step "):
            env["CKPT_STEP_HOLD"] = f"{cut.hold.split()[1]}:{self.workdir / 'never'}"
        if cut.crash:
            self.fs.arm_crash(*cut.crash)
        process = self._start(env)
        if cut.hold:
            process.wait_for(cut.hold + (r" .*" if cut.hold == "resumed_from" else ""))
            process.kill()
        else:
            while process.popen.poll() is None and self.fs.alive():
                time.sleep(0.02)
            process.kill()  # at once: its file system is gone
            if self.fs.alive():  # the run ended before the call: nothing was cut
                process.finish()
                if not process.find(r"finished step_count=\d+ t=.*"):
                    process.fail(f"{cut.name}: the run failed on its own")
                self.fs.remount()  # disarms the crash
                self.stats["missed cuts"] += 1
                self._check_start(process, on_disk)
                self.previous = None
                return False
        process.finish()
        self._check_start(process, on_disk)
        if cut.hold:
            self.fs.power_cut()
        else:
            self.fs.remount()
        self.stats["cache entries emptied"] += empty_files(self.cache)
        self.stats["cuts"] += 1
        self.stats[f"cuts: {'signal' if cut.hold else 'crash'}"] += 1
        if step_lines(process):  # else the steps of the run cut before it are still to be redone
            self.previous = process
        return True

    def run_to_end(self) -> Process:
        on_disk = saved_steps(self.workdir)
        process = self._start()
        if process.finish() != 0 or not process.find(r"finished step_count=\d+ t=.*"):
            process.fail(f"the last run did not finish (exit {process.popen.returncode})")
        self._check_start(process, on_disk)
        if "Error reading persistent compilation cache" in process.output:
            process.fail("JAX met a cache entry a cut left unreadable (nkserde removes the empty ones when it starts)")
        return process

    def _check_start(self, process: Process, on_disk: list[int]) -> None:
        """A run that got to its start resumed from the newest checkpoint
        the cut left (each one whole: none skipped), and was not refused.
        (What a run printed once its file system was gone is not looked at.)"""
        resumed = next((i for i, line in enumerate(process.lines) if line.startswith("resumed_from ")), None)
        head = "\n".join(process.lines[: None if resumed is None else resumed + 1])
        if "not connected" in head or "connection abort" in head:
            return  # LazyFS was gone before the run resumed
        for refusal in ("in use by", "being written", "already running", "skipping checkpoint"):
            if refusal in head:
                process.fail(f"after a power cut the run printed {refusal!r}")
        if resumed is None:
            return  # cut before it started
        start = resumed_from(process)
        if start != (on_disk[-1] if on_disk else None):
            process.fail(f"resumed from {start}, the newest checkpoint on disk was {on_disk}")
        if start is not None:
            self.stats["resumes"] += 1
        if self.previous is not None:  # steps the cut run completed that this one does again
            done = step_lines(self.previous)
            self.stats["steps redone"] += max(0, (done[-1] if done else 0) - (start or 0))
            self.previous = None


def empty_files(directory: Path) -> int:
    """Empty files under ``directory``: what a cut leaves of a cache entry
    written and never fsynced (the rerun removes JAX's, and passes over the
    others)."""
    return sum(1 for p in directory.rglob("*") if p.is_file() and p.stat().st_size == 0)


def check_end(workdir: Path, reference: Outcome) -> None:
    problems = end_differences(workdir, reference)
    locks = list(workdir.rglob(".lock"))
    if locks:
        problems.append(f"locks left after the last run: {locks}")
    if problems:
        raise AssertionError(f"{workdir.name} ended otherwise than the uninterrupted run:\n" + "\n".join(problems))


# ------------------------------------------------------------------ the set-up


class Bench:
    """The mount, the reference (a run without checkpoints, its compiled
    code in a JAX cache of its own, off the mount) and nkserde's
    compilation cache on the mount, empty: the first chain's first run
    compiles everything, and a cut loses what it compiled (empty files,
    counted as "cache entries emptied"); its rerun compiles again. Each
    chain ends with the cache written through (what a kernel's writeback
    does within seconds): the later chains start warm."""

    def __init__(self, fs: LazyFS, scratch: Path):
        self.fs = fs
        self.cache = fs.mount / "cache"
        (scratch / "jax-cache").mkdir(parents=True)
        self.runner = Runner(scratch / "jax-cache")
        self.runner.env["CKPT_RESULT_SAMPLER"] = "1"  # the chains end with the reference's sampler state too
        reference_dir = scratch / "reference"
        reference_dir.mkdir()
        self.runner.run_to_end("vmc", reference_dir, "--mode", "plain")
        self.reference = Outcome(reference_dir)
        assert self.reference.step_count == STEPS
        assert any(name.startswith("sampler_state") for name in self.reference.arrays), sorted(self.reference.arrays)
        # the checkpointed runs: nkserde's own cache (the tests' JAX cache is not set)
        self.env = {"CKPT_JAX_CACHE": "", "NKSERDE_COMPILATION_CACHE": str(self.cache)}

    def chain(self, name: str, writer: str) -> Chain:
        return Chain(self.fs, self.runner, self.fs.mount / name, writer, self.env, self.cache)


def run_chain(bench: Bench, name: str, writer: str, cuts: list[Cut]) -> Counter:
    """A chain cut at each of ``cuts`` in turn, then run to its end; raises
    AssertionError if it ends otherwise than the reference."""
    chain = bench.chain(name, writer)
    for cut in cuts:
        if not chain.run_cut(cut):
            break
    chain.run_to_end()
    check_end(chain.workdir, bench.reference)
    chain.stats["chains"] += 1
    bench.fs.persist()
    return chain.stats


# ------------------------------------------------------------------ random cuts


def random_cut(rng: random.Random, newest: int) -> Cut:
    """A cut anywhere a run that resumes from step ``newest`` writes:
    start-up, the lock, a checkpoint's write (its data, its publication),
    the history log, between saves, the JsonLog, the compilation cache."""
    k = rng.randint(min(newest + 1, STEPS), STEPS)
    step = step_file(k)
    temp = rf"step-{k:010d}\.nks.*nkserde-tmp"
    return rng.choice(
        [
            Cut("SIGKILL once imported (start-up)", hold="imported"),
            Cut("SIGKILL once resumed (the lock held)", hold="resumed_from"),
            step_hold(k),
            crash("after the lock is linked", "after", "link", "nkserde-tmp", r"\.lock$"),
            crash("before the fingerprint is published", "before", "rename", "nkserde-tmp", r"fingerprint\.json$"),
            crash(f"writing checkpoint {k}", "before", "write", temp),
            crash(f"before checkpoint {k}'s data is synced", "before", "fsync", temp),
            crash(f"before checkpoint {k} is published", "before", "rename", "nkserde-tmp", step),
            crash(f"after checkpoint {k} is published", "after", "rename", "nkserde-tmp", step),
            crash("before a history append is synced", "before", "fsync", r"history-\d+\.nkh$"),
            crash("writing the JsonLog", "before", "write", r"out/log\.log$"),
            crash("writing a compile cache entry", "before", "write", r"cache/.*"),
        ]
    )


def random_cuts(bench: Bench, cuts: int, seed: int, per_chain: int = 5) -> Counter:
    rng = random.Random(seed)
    totals: Counter = Counter()
    c = 0
    while totals["cuts"] < cuts:
        if c > 4 * cuts:
            raise AssertionError(f"after {c} chains, {totals['cuts']} cuts were taken")
        writer = ("sync", "async")[c % 2]
        chain = bench.chain(f"chain-{c}", writer)
        for _ in range(min(per_chain, cuts - totals["cuts"])):
            on_disk = saved_steps(chain.workdir)
            if on_disk and on_disk[-1] == STEPS:
                break  # the run has ended: the rerun only checks it
            cut = random_cut(rng, on_disk[-1] if on_disk else 0)
            if not chain.run_cut(cut):
                break
            chain.stats[f"cut: {re.sub(r' [0-9]+', ' k', cut.name)}"] += 1
        chain.run_to_end()
        check_end(chain.workdir, bench.reference)
        chain.stats["chains"] += 1
        bench.fs.persist()
        totals.update(chain.stats)
        c += 1
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nkserde-power-") as root:
        runner = None
        try:
            with LazyFS(binary(), Path(root) / "lazyfs") as fs:
                bench = Bench(fs, Path(root) / "scratch")
                runner = bench.runner
                warm_up = run_chain(bench, "warm-up", "sync", [step_hold(2)])
                print(f"warm-up chain (a cold run cut at step 2): {dict(warm_up)}", flush=True)
                totals = random_cuts(bench, args.cuts, args.seed)
        finally:
            if runner is not None:
                runner.kill_all()
    for key, value in sorted(totals.items()):
        print(f"{key}: {value}")
    print(f"every chain ended as the uninterrupted run; {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
