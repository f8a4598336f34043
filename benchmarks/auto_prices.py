"""What ``every="auto"`` prices each of its checkpoints at, beside what the
loop lost to them: rbm-100x1000 (benchmarks/checkpoint_overhead.py), a run
of ``--steps`` steps plain and one with ``every="auto"``, ``--repeat``
times alternating.

    python benchmarks/auto_prices.py [--steps 1500] [--repeat 2]

Prints, per repeat, both loops and what the save schedule was told and
decided: each checkpoint taken (and the interval to the next), each price
(``saved``: a synchronous checkpoint or a background write's snapshot;
``write_ended``: the write's own time and the steps' slowdown while it went
on, the larger being its price). Runs on whatever device JAX picks (on a
TPU machine, the chip): the prices on a CPU and on an accelerator differ
in what dominates them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import checkpoint_overhead as co  # noqa: E402

import nkserde  # noqa: E402
from nkserde.checkpoint.save_policy import SaveSchedule  # noqa: E402

EVENTS: list[tuple] = []


class LoggedSchedule(SaveSchedule):
    """The run's save schedule, each call it gets written to EVENTS."""

    def saved(self, seconds):
        EVENTS.append(("saved", round(seconds * 1e3, 1), "ms"))
        super().saved(seconds)

    def write_ended(self, now, completed, own_seconds):
        slower = self.slowdown(now, completed)
        EVENTS.append(("write_ended", "at step", completed, "own", round(own_seconds * 1e3, 1), "ms", "slower",
                       None if slower is None else round(slower * 1e3, 1), "ms"))  # fmt: skip
        super().write_ended(now, completed, own_seconds)

    def taken(self, now):
        super().taken(now)
        interval = self.interval()
        EVENTS.append(("taken", "next after", None if interval is None else round(interval, 3), "s"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    import nkserde.checkpoint.run as run_module

    run_module.SaveSchedule = LoggedSchedule  # what Run builds for every run of this process
    template = co.build("rbm-100x1000")
    template.run(2, show_progress=False)  # compile
    template._step_count = 0
    snapshot = nkserde.state_dict(template)

    def fresh():
        return nkserde.from_state_dict(template, snapshot)

    parent = Path(tempfile.mkdtemp())
    co.timed_run(fresh(), 2, (1, True), parent)  # one-time costs of a first checkpoint
    co.timed_run(fresh(), 2, None, parent)
    for r in range(args.repeat):
        plain = co.timed_run(fresh(), args.steps, None, parent)
        EVENTS.clear()
        auto = co.timed_run(fresh(), args.steps, ("auto", True), parent)
        over = (auto["loop"] / plain["loop"] - 1) * 100
        print(f"repeat {r + 1}/{args.repeat}: loop plain {plain['loop']:.3f} s, auto {auto['loop']:.3f} s "
              f"({over:+.2f} %), checkpoints {auto['saves_in_loop']} in the loop + {auto['saves_at_end']} at the end",
              flush=True)  # fmt: skip
        for event in EVENTS:
            print("   ", *event)
    return 0


if __name__ == "__main__":
    sys.exit(main())
