"""A key-value store of files in one directory, shared by test processes
on one machine (tests/test_peer_watch.py): the few calls a peer watch
makes, without JAX's coordination service."""

from __future__ import annotations

import os
import time
import urllib.parse
from pathlib import Path

from nkserde.processes.coordination import StoreTimeout


class FileStore:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / urllib.parse.quote(key, safe="")

    def put(self, key: str, value: bytes) -> None:
        temp = self._path(key).with_suffix(f".{os.getpid()}.tmp")
        temp.write_bytes(value)
        temp.replace(self._path(key))

    def try_get(self, key: str) -> bytes | None:
        path = self._path(key)
        return path.read_bytes() if path.exists() else None

    def get(self, key: str, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while (value := self.try_get(key)) is None:
            if time.monotonic() > deadline:
                raise StoreTimeout(key)
            time.sleep(0.05)
        return value
