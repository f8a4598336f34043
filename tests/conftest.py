"""Shared by every test module: the helper modules are importable by name
(``import builders``; ``import scenarios`` of tests/fixtures) whatever the
working directory or pytest's import mode."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).parent
for _path in (TESTS, TESTS / "fixtures"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
