"""Suite-wide hooks: the tests that wait for SLURM jobs (marked ``slurm``)
submit their jobs when the suite is collected and run last, so the jobs,
which mostly wait for their time limits, run beside the CPU-bound tests
(tests/cluster.py)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

_roots: list[Path] = []


def pytest_collection_modifyitems(config, items):
    waiting = [item for item in items if item.get_closest_marker("slurm")]
    if waiting:
        items[:] = [item for item in items if not item.get_closest_marker("slurm")] + waiting


def pytest_collection_finish(session):
    modules = {id(item.module): item.module for item in session.items if item.get_closest_marker("slurm")}
    for module in modules.values():
        jobs = getattr(module, "JOBS", None)
        if jobs is not None:
            root = Path(tempfile.mkdtemp(prefix=f"nkserde-{module.__name__}-"))
            _roots.append(root)
            jobs.submit(root)
            session.config.add_cleanup(jobs.cancel_all)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0:
        for root in _roots:
            shutil.rmtree(root, ignore_errors=True)
