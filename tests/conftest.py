"""Suite-wide hooks: the tests that wait for SLURM jobs (marked ``slurm``)
submit their jobs when the suite is collected and run last, so the jobs,
which mostly wait for their time limits, run beside the CPU-bound tests
(tests/cluster.py; the two-node cluster's scenario, tests/two_node_scenario.py,
likewise); the longest files run first.

Under pytest-xdist (the README's ``-n 2``) every worker collects the
suite: the jobs' directory is named by a key the main process sets
before it starts the workers, so they all find the one submission.

Each test process (each xdist worker) compiles into a persistent JAX
compilation cache of its own, a temporary directory removed with the
session's: a test that builds a driver NetKet has already compiled in this
process (another fixture file, the template of a load) traces it again but
takes the executable from the cache instead of compiling it again (the
eight TDVP fixtures of tests/test_fixtures.py: 91 s -> 33 s). Set in JAX's
configuration, not its environment, so that the processes the tests launch
see no cache but the ones they are given.

The fixture ``default_sigint`` gives a test Python's own SIGINT handler,
as in a terminal: a suite started as a background job of a
non-interactive shell inherits SIGINT ignored, and a test that sends
itself a Ctrl-C would see nothing."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

import pytest

SESSION = "NKSERDE_TEST_SESSION"


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the main process: before any worker starts
        os.environ[SESSION] = uuid.uuid4().hex[:12]
    if not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist") and config.option.numprocesses:
        return  # the controller of xdist's workers runs no test
    _use_a_compilation_cache(config.workerinput["workerid"] if hasattr(config, "workerinput") else "main")


def _use_a_compilation_cache(worker: str) -> None:
    import persistent_cache

    cache = Path(tempfile.gettempdir()) / f"nkserde-jaxcache-{worker}-{os.environ[SESSION]}"
    cache.mkdir(exist_ok=True)
    persistent_cache.use(cache)


def _roots() -> list[Path]:
    # the session's directories: its jobs', and the two-node scenario's on
    # the cluster's shared file system and in the nodes' common /var/tmp
    places = (Path(tempfile.gettempdir()), Path("/shared-fs"), Path("/var/tmp"))
    return sorted(p for place in places for p in place.glob(f"nkserde-*-{os.environ[SESSION]}"))


# The longest files (minutes of launched processes each), handed out first:
# xdist's loadfile gives a free worker the next file in collection order, so
# the longest first leaves the shortest tail of one worker busy, the other idle.
# Then the files of a minute or more each (CI's --durations), before the
# many small ones; not test_power_loss.py, which waits for LazyFS's build.
LONGEST_FIRST = (
    "test_example_scripts.py",
    "test_distributed.py",
    "test_checkpoint_kill.py",
    "test_mpi.py",
    "test_compile_cache.py",
    "test_peer_watch.py",
    "test_platform_moves.py",
    "test_samplers.py",
    "test_fixtures.py",
    "test_cli.py",
    "test_docs.py",
    "test_interruptions.py",
    "test_notebook.py",
)


def pytest_report_header(config):
    # which fixtures this machine must continue number for number
    # (tests/test_fixtures.py: the writer's releases and CPU kind)
    import json

    from nkserde.caches import jax_executables as jax_cache

    cpu = jax_cache.cpu_kind()
    fixtures = Path(__file__).parent / "fixtures"
    same = sorted(
        p.parent.name
        for pattern in ("*/expected.json", "*/histories.json")
        for p in fixtures.glob(pattern)
        if json.loads(p.read_text()).get("cpu") == cpu
    )
    return f"nkserde: CPU kind {cpu}; fixtures written on it: {', '.join(same) or 'none'}"


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: in-file order kept
    waiting = [item for item in items if item.get_closest_marker("slurm")]
    if waiting:
        items[:] = [item for item in items if not item.get_closest_marker("slurm")] + waiting


def pytest_runtest_setup(item):
    # the tests marked plot draw with matplotlib (the plot extra): without
    # it they skip, or fail where it is required (.ci/run runs them in its
    # Python 3.13 venv; docs/development.md says why not in the suite's)
    if item.get_closest_marker("plot"):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            if os.environ.get("NKSERDE_REQUIRE_PLOT") == "1":
                pytest.fail("NKSERDE_REQUIRE_PLOT=1 and matplotlib is not installed")
            pytest.skip('draws with matplotlib: pip install -e ".[test,plot]"')


def pytest_collection_finish(session):
    if session.config.option.collectonly:  # nothing runs: nothing is submitted
        return
    modules = {id(item.module): item.module for item in session.items if item.get_closest_marker("slurm")}
    for module in modules.values():
        jobs = getattr(module, "JOBS", None)
        if jobs is not None:
            jobs.submit(Path(tempfile.gettempdir()) / f"nkserde-{module.__name__}-{os.environ[SESSION]}")
            if not hasattr(session.config, "workerinput"):
                # one process: nothing else waits for them. Under xdist the
                # jobs end by their own time limits (another worker may
                # still be waiting for them when this one ends).
                session.config.add_cleanup(jobs.cancel_all)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0 and not hasattr(session.config, "workerinput"):
        for root in _roots():
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler for the test (restored after it), as in
    a terminal: a background job of a non-interactive shell inherits SIGINT
    ignored."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
