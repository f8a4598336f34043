"""A kill-and-signal torture of checkpointed runs: chains of runs of the
same script (tests/_ckpt_script.py: an 8-site VMC with a JsonLog, 8 steps
of about STEP_SECONDS each), each run interrupted at a random moment by a
random SIGKILL, SIGTERM or SIGINT (start-up, resume, mid-step, inside a
save) and run again, until one run reaches the end. Every chain must end
with the parameters and the JsonLog (every step once) of the run never
interrupted; every interrupted run must exit as its signal says (SIGKILL:
killed; SIGTERM: 75 once the Checkpoint holds the signal, killed before;
SIGINT: KeyboardInterrupt). The moments are drawn from the end of the
script's imports (its "imported" line): before it the interpreter and
NumPy's and jaxlib's extensions decide (a SIGINT in `import jax, netket`
alone segfaults at times) and no checkpoint is at stake.

    python tests/torture.py --interruptions 60 --seed 1       # prints the figures

tests/test_interruptions.py runs a short one (a few interruptions) in CI.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from test_checkpoint_kill import Outcome, Runner, end_differences

SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
STEP_SECONDS = 0.3
# (every, writer) per chain, in turn: both writers, a checkpoint every step and every third
SETTINGS = [("1", []), ("3", ["--sync"]), ("3", []), ("1", ["--sync"])]


def exit_is_expected(signum: int, code: int, finished: bool) -> bool:
    if finished:  # the run ended before the signal: 0, or the signal met the interpreter's exit
        return code in (0, -signum) or (signum == signal.SIGINT and code in (1, 130))
    if signum == signal.SIGKILL:
        return code == -signal.SIGKILL
    if signum == signal.SIGTERM:  # 75 once caught by the Checkpoint; Python's default before
        return code in (75, -signal.SIGTERM)
    # SIGINT: a KeyboardInterrupt Python ends with (it re-raises SIGINT to die of it)
    return code in (-signal.SIGINT, 1, 130)


def chain(runner: Runner, workdir: Path, rng: random.Random, interruptions: int, options, window) -> dict:
    """Runs the script in ``workdir`` until it ends: each run is signalled
    at a random moment within ``window`` seconds of its imports, until
    ``interruptions`` signals reached a live run (a run that ended first
    does not count; the window starts at the run's "imported" line); the
    last run goes to the end. Returns what happened."""
    stats = Counter()
    env = {"CKPT_STEP_SECONDS": str(STEP_SECONDS)}
    for _ in range(4 * interruptions + 1):  # runs that end before the signal end the chain early
        process = runner.start("vmc", workdir, *options, env=env)
        if stats["interruptions"] >= interruptions:
            code = process.finish()
            stats["final runs"] += 1
            if code != 0 or not process.find(r"finished step_count=\d+ t=.*"):
                raise AssertionError(f"the last run of the chain failed ({code}):\n{process.output[-3000:]}")
            break
        signum = rng.choice(SIGNALS)
        # the moment is drawn from the end of the script's imports, however
        # long a busy machine takes to get there: before it, the interpreter
        # and its C extensions alone meet a signal (a SIGINT in `import jax,
        # netket` can segfault without nkserde), no checkpoint is at stake
        process.wait_for("imported")
        time.sleep(rng.uniform(*window))
        alive = process.popen.poll() is None
        if alive:
            process.popen.send_signal(signum)
        code = process.finish()
        finished = bool(process.find(r"finished step_count=\d+ t=.*"))
        if not alive:
            stats["runs that ended before the signal"] += 1
        else:
            stats[f"interruptions by {signal.Signals(signum).name}"] += 1
            stats["interruptions"] += 1
            if any(line.startswith("step ") for line in process.lines):
                stats["interruptions during the run's steps"] += 1
            if not exit_is_expected(signum, code, finished):
                raise AssertionError(
                    f"{signal.Signals(signum).name}: exit {code} (finished: {finished}):\n{process.output[-3000:]}"
                )
        if finished:
            stats["chains that finished before their last interruption"] += 1
            break
        if "resumed_from None" not in process.output and any("resumed_from" in line for line in process.lines):
            stats["resumes"] += 1
    return dict(stats)


def torture(root: Path, interruptions: int, seed: int, chains: int | None = None, window=None) -> dict:
    """At least ``interruptions`` signals that reached a live run, over
    chains of about 5 each (or ``chains`` chains; more if chains end before
    their share); raises AssertionError if a chain ends otherwise than the
    straight run. The moments are drawn within ``window`` seconds of the end
    of a run's imports, by default over the length of a run whose compiled code
    is cached, as the reruns' is (measured: one run more)."""
    runner = Runner(root / "jax-cache")
    try:
        reference_dir = root / "reference"
        reference_dir.mkdir(parents=True)
        env = {"CKPT_STEP_SECONDS": str(STEP_SECONDS)}
        runner.run_to_end("vmc", reference_dir, "--mode", "plain", env=env)  # compiles, fills the cache
        if window is None:
            warm_dir = root / "warm"
            warm_dir.mkdir()
            started = time.monotonic()
            runner.run_to_end("vmc", warm_dir, "--mode", "checkpointed", env=env)
            window = (0.2, time.monotonic() - started)
        reference = Outcome(reference_dir)
        rng = random.Random(seed)
        share = max(1, round(interruptions / chains)) if chains else 5
        totals: Counter = Counter()
        c = 0
        while totals["interruptions"] < interruptions:
            if c > 4 * interruptions:
                raise AssertionError(f"after {c} chains, {totals['interruptions']} signals reached a live run")
            every, writer = SETTINGS[c % len(SETTINGS)]
            workdir = root / f"chain-{c}"
            workdir.mkdir()
            count = min(share, interruptions - totals["interruptions"])
            stats = chain(runner, workdir, rng, count, ["--mode", "checkpointed", "--every", every, *writer], window)
            problems = end_differences(workdir, reference)
            if problems:
                raise AssertionError(f"chain {c} (every={every} {writer}) ended otherwise:\n" + "\n".join(problems))
            totals.update(stats)
            totals["chains"] += 1
            c += 1
        totals["window seconds"] = round(window[1], 1)
        return dict(totals)
    finally:
        runner.kill_all()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interruptions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nkserde-torture-") as root:
        started = time.monotonic()
        totals = torture(Path(root), args.interruptions, args.seed)
        for key, value in sorted(totals.items()):
            print(f"{key}: {value}")
        print(f"every chain ended as the uninterrupted run; {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
