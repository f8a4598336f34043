"""What every benchmark records of where it ran, and where it writes."""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

DEFAULT_PARENT = Path("/work/bench-tmp")  # this machine's scratch disk, if it has one


def parent_directory(given: str | None) -> Path:
    """Where a benchmark writes: ``given``, else DEFAULT_PARENT if it
    exists, else the system's temporary directory (created if needed)."""
    parent = Path(given) if given else DEFAULT_PARENT if DEFAULT_PARENT.is_dir() else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def environment(parent: Path) -> dict:
    """The versions, CPUs, directory and load average before the run."""
    import jax
    import netket as nk

    import nkserde

    return {
        "python": platform.python_version(),
        "netket": nk.__version__,
        "jax": jax.__version__,
        "nkserde": nkserde.__version__,
        "cpus": os.cpu_count(),
        "dir": str(parent),
        "loadavg_before": os.getloadavg(),
    }
