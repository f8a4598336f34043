"""Launches real JAX processes over gloo on 127.0.0.1, for the tests of
multi-process runs.

``launch(n, args, workdir)`` starts ``n`` processes of
``tests/_mp_worker.py RANK N PORT *args`` on a free port and waits for all of
them (bounded by a timeout: a hung collective kills the group and fails the
test with every process's output); ``args`` is one action, or several
joined by :func:`in_turn`. No mock of ``jax.process_count()``: each
process calls ``jax.distributed.initialize``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 now: the coordinator address of JAX
    processes launched on one machine (tests, benchmarks)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


WORKER = Path(__file__).with_name("_mp_worker.py")
TIMEOUT = 240  # seconds for a whole group, per action


def in_turn(*actions) -> list:
    """The arguments of one launch doing each action (``[ACTION, WORKDIR,
    options...]``) in turn, in the same processes."""
    return [str(arg) for action in actions for arg in ("+", *action)][1:]


def launch(
    n: int,
    args,
    *,
    jax_cache: Path | None = None,
    timeout: float | None = None,
    env: dict | None = None,
    expect_failure: bool = False,
    worker: Path = WORKER,
) -> list[str]:
    """Runs the worker in ``n`` processes; returns their outputs (rank
    order). Raises AssertionError if one fails (or, with
    ``expect_failure``, if none does) or the group times out (``timeout``;
    by default TIMEOUT per action)."""
    args = [str(a) for a in args]
    timeout = timeout or TIMEOUT * (1 + args.count("+"))
    port = free_local_port()
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    if jax_cache is not None:
        environ["MP_JAX_CACHE"] = str(jax_cache)
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(r), str(n), str(port), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environ,
            cwd=str(Path(__file__).parent),
        )
        for r in range(n)
    ]
    deadline = time.monotonic() + timeout
    outputs = [""] * n
    timed_out = False
    for r, p in enumerate(procs):
        try:
            outputs[r] = p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            p.kill()
        for r, p in enumerate(procs):
            outputs[r] = outputs[r] or p.communicate()[0]
    codes = [p.returncode for p in procs]
    report = "\n".join(f"--- process {r} (exit {c}):\n{o[-6000:]}" for r, (c, o) in enumerate(zip(codes, outputs)))
    if timed_out:
        raise AssertionError(f"{n} processes {list(args)} timed out after {timeout} s\n{report}")
    if expect_failure:
        if all(c == 0 for c in codes):
            raise AssertionError(f"expected a failure of {list(args)}\n{report}")
    elif any(c != 0 for c in codes):
        raise AssertionError(f"{n} processes {list(args)} failed\n{report}")
    return outputs
