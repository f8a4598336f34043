"""The two-node SLURM cluster of ../shared/tools/two-nodes, for
tests/test_two_nodes.py: node1 and node2, each its own hostname, pid
space, /tmp and boot id, one ``/shared-fs`` seen by each node through its
own LazyFS (what a node has not fsynced stays on it and dies with it), a
controller with accounting (``sacct``), and nodes that lose power on
command (``node-kill.sh``).

Started by ``.ci/run`` beside the one-node SLURM (its own ``SLURM_CONF``);
by hand::

    TWO_NODES_LAZYFS=$(bash ../shared/tools/lazyfs/build.sh) TWO_NODES_CRED_EXPIRE=10 \\
        ../shared/tools/two-nodes/up.sh

Jobs write their output to their node's own /tmp (a local disk: it
survives the node's death and the host reads it at
``/tmp/two-nodes/<node>/tmp``): slurmstepd never fsyncs it, so on the
shared file system a killed node's output would be lost with it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(os.environ.get("NKSERDE_TWO_NODES_TOOLS", "/work/shared/tools/two-nodes"))
STATE = Path("/tmp/two-nodes")  # the cluster's files (common.sh's TN)
CONF = STATE / "slurm.conf"
SHARED = Path("/shared-fs")
NODES = ("node1", "node2")
OUTPUT = Path("/tmp/nkserde-two-nodes")  # on each node's own disk: a directory per scenario
START_TIMEOUT = 900  # seconds CI may take to build LazyFS and start the cluster


def problem() -> str | None:
    """Why the two-node cluster cannot be used now, or None."""
    if os.geteuid() != 0:
        return "the two-node cluster needs root"
    if not (TOOLS / "up.sh").exists():
        return f"no {TOOLS}/up.sh (set NKSERDE_TWO_NODES_TOOLS)"
    if not CONF.exists():
        return f"no {CONF}: start the cluster ({TOOLS}/up.sh; .ci/run does)"
    lazyfs = (STATE / "lazyfs").read_text().strip() if (STATE / "lazyfs").exists() else ""
    if not lazyfs:
        return "the two-node cluster runs without LazyFS: start it with TWO_NODES_LAZYFS (down.sh first)"
    try:
        states = slurm("sinfo", "-h", "-N", "-o", "%N %t", timeout=20).stdout.split("\n")
    except subprocess.TimeoutExpired:
        return "the two-node cluster's controller does not answer"
    idle = {line.split()[0] for line in states if line.strip() and line.split()[1] in ("idle", "mix", "alloc")}
    if idle != set(NODES):
        return f"the two-node cluster's nodes are not both up: {states}"
    return None


def wait_for_cluster(timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    while (why := problem()) is not None and time.monotonic() < deadline:
        time.sleep(3.0)
    return why


def environment(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    env["SLURM_CONF"] = str(CONF)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def slurm(*command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment())


def submit(name: str, script: Path | None, workdir: Path, output: Path, options: list[str], env: dict) -> str:
    """sbatch on the two-node cluster (``script``, or ``--wrap`` in
    ``options``); the job id. Its output goes to ``output/<name>-<job
    id>.out`` on the node each attempt runs on (``output``: a directory of
    the nodes' own /tmp)."""
    done = subprocess.run(
        ["sbatch", "--parsable", f"--job-name={name}", f"--chdir={workdir}", f"--output={output}/%x-%j.out",
         "--open-mode=append", *options, *([str(script)] if script is not None else [])],
        capture_output=True, text=True, timeout=60, env=environment(env),
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"sbatch {name}: {(done.stdout + done.stderr).strip()}")
    return done.stdout.strip().split(";")[0]


def attempts(job_id: str) -> list[dict]:
    """Every attempt of a job as SLURM's accounting has it (``sacct -D``):
    state, node list, start and end, oldest first."""
    out = slurm("sacct", "-j", job_id, "-D", "-X", "-n", "-P", "-o", "JobID,State,NodeList,Start,End,ExitCode").stdout
    found = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 6 and parts[0] == job_id:
            found.append(dict(zip(("job", "state", "nodes", "start", "end", "exit"), parts)))
    return found


def show(job_id: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S*)", slurm("scontrol", "show", "job", "--oneliner", job_id).stdout))


def state(job_id: str) -> str:
    """The job's state now (squeue, else its last attempt's in sacct)."""
    out = slurm("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip()
    if out:
        return out
    found = attempts(job_id)
    return found[-1]["state"].split()[0] if found else "UNKNOWN"


FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def node_state(node: str) -> str:
    return _sinfo_state(node).stdout.strip()


def _sinfo_state(node: str) -> subprocess.CompletedProcess:
    """sinfo's answer for ``node``'s state (``down``, ``idle``, ...)."""
    return slurm("sinfo", "-h", "-N", "-n", node, "-o", "%t")


def down_since(node: str, after: float) -> float | None:
    """When SLURM set ``node`` DOWN at ``after`` or later (the node event
    its accounting records, to the second), or None. Read from the record,
    not from a poll of the node's state: a state seen late, or never
    while it lasted, does not move the time."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(after - 1))
    for line in node_events(node, "TimeStart,State", f"start={start}").splitlines():
        begun, _, state = line.partition("|")
        if state.startswith("DOWN"):
            when = time.mktime(time.strptime(begun, "%Y-%m-%dT%H:%M:%S"))
            if when >= int(after):
                return when
    return None


def node_events(node: str, fields: str, *since: str) -> str:
    """The node's events in SLURM's accounting (``sacctmgr list event``),
    ``fields`` of each, a line each, ``|`` between fields."""
    return slurm("sacctmgr", "-n", "-P", "list", "event", f"nodes={node}", *since, f"format={fields}").stdout.strip()


def kill(node: str) -> float:
    """The node loses power (its network, then every process); the time."""
    subprocess.run([str(TOOLS / "node-kill.sh"), node], check=True, capture_output=True, timeout=120)
    return time.time()


def cut(node: str) -> float:
    """``node`` cut off the network (its link dark, its processes alive, no
    FIN or RST); the time."""
    subprocess.run([str(TOOLS / "node-cut.sh"), node], check=True, capture_output=True, timeout=60)
    return time.time()


def heal(node: str) -> None:
    """``node``'s network back if it was cut (nothing if it was not, or the
    node is powered off)."""
    subprocess.run([str(TOOLS / "node-heal.sh"), node], capture_output=True, timeout=60)


def power_on(node: str, timeout: float = 180) -> None:
    """``node`` powered on, its slurmd started. node-up.sh waits 20 s for
    slurmd, which starts once the node's LazyFS has filled its 512 MB
    cache: longer on a busy machine. Its "slurmd did not start" is waited
    past here, up to ``timeout`` s, for the pid file it removed before
    starting the node."""
    up = subprocess.run([str(TOOLS / "node-up.sh"), node], capture_output=True, text=True, timeout=120)
    if up.returncode == 0:
        return
    if "slurmd did not start" not in up.stderr:
        raise RuntimeError(f"node-up.sh {node}: exit {up.returncode}: {up.stderr.strip()}")
    pid_file, console = STATE / node / "slurmd.pid", STATE / node / "console.log"
    wait_for(f"{node}'s slurmd", lambda: pid_file.exists() and pid_file.stat().st_size > 0, timeout,
             seen=lambda: up.stderr.strip() + " | " + console.read_text(errors="replace")[-600:])  # fmt: skip


def node_exec(node: str, command: list[str], *, env: dict, cwd: Path, output: Path) -> subprocess.Popen:
    """``command`` run on ``node`` (as if logged in there), outside SLURM,
    in ``cwd``, its output in ``output`` (a path as the node sees it)."""
    inner = ["env", "-i", *(f"{k}={v}" for k, v in environment(env).items() if k != "SLURM_CONF"),
             "sh", "-c", f'cd "$0" && exec "$@" >> "{output}" 2>&1', str(cwd), *command]  # fmt: skip
    return subprocess.Popen([str(TOOLS / "node-exec.sh"), node, *inner], stdin=subprocess.DEVNULL)


def local(node: str, path: Path) -> Path:
    """Where the host sees ``path`` of ``node``'s /tmp."""
    return STATE / node / "tmp" / Path(path).relative_to("/tmp")


def wait_for(what: str, condition, timeout: float, every: float = 0.5, seen=None):
    """``condition()``'s first true value within ``timeout`` s, else
    RuntimeError, which says what ``seen()`` (if given) answers then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s" + (f"; seen: {seen()}" if seen else ""))


def wait_down(node: str, after: float, timeout: float = 120) -> float:
    """When SLURM set ``node`` DOWN, once it has (``down_since``)."""
    return wait_for(f"{node} down", lambda: down_since(node, after), timeout, seen=lambda: node_seen(node))


def node_seen(node: str) -> str:
    """What SLURM says of ``node``: sinfo's answer and its node events."""
    state = _sinfo_state(node)
    events = node_events(node, "TimeStart,TimeEnd,State,Reason")
    return f"sinfo {state.returncode} {(state.stdout + state.stderr).strip()!r}; events {events!r}"


def steps(text: str) -> list[tuple[int, float]]:
    """(k, time) of the ``step <k> <time>`` lines of tests/scripts/cluster_run.py."""
    return [(int(k), float(t)) for k, t in re.findall(r"^step (\d+) (\d+\.\d+)$", text, re.M)]
