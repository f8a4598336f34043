"""The first commands of docs/getting-started.md: examples/*.py run as a user runs them, in a
subprocess, and say what the page says they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent / "examples"


def run(*args, cwd, status=0) -> str:
    done = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == status, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_every_example_is_run_here():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == ["resume_after_interrupt.py", "save_load_continue.py"]


def test_save_load_continue_ends_like_the_uninterrupted_run(tmp_path):
    out = run(EXAMPLES / "save_load_continue.py", cwd=tmp_path)
    assert "loaded into a fresh driver: step 10" in out
    assert "energies identical: True, final parameters identical: True" in out


def test_resume_after_interrupt_resumes_and_finishes(tmp_path):
    args = ("--interrupt-at", 30, "--dir", tmp_path / "run")
    first = run(EXAMPLES / "resume_after_interrupt.py", *args, cwd=tmp_path, status=75)  # EX_TEMPFAIL
    assert "interrupted by SIGTERM after step 30; running the same script again resumes" in first
    assert "finished" not in first  # the program ended at the signal
    second = run(EXAMPLES / "resume_after_interrupt.py", "--dir", tmp_path / "run", cwd=tmp_path)
    assert "resumed from step 30" in second
    assert "finished: 100 steps" in second and "log of 100 steps" in second
