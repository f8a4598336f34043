"""A second host of the tests' own: a network namespace joined to this one
by a veth pair, whose link the test cuts (its processes live on, their
packets vanish: no FIN, no RST), as a node's network drops out. Root
only; skipped elsewhere, and failed instead under
``NKSERDE_REQUIRE_MOUNTS=1`` (CI runs as root).

    with NetworkNamespace() as other:
        other.popen([sys.executable, ...])   # runs there, reaching this host at other.host_address
        other.cut()                          # its link dark
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

REQUIRED = os.environ.get("NKSERDE_REQUIRE_MOUNTS") == "1"


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True, timeout=30)


class NetworkNamespace:
    def __init__(self):
        if os.geteuid() != 0 or shutil.which("ip") is None:
            reason = "a network namespace needs root and iproute2's ip"
            if REQUIRED:
                pytest.fail(f"NKSERDE_REQUIRE_MOUNTS=1 and {reason}")
            pytest.skip(reason)
        tag = os.getpid() % 100000
        self.name, self.link = f"nkserde-{tag}", f"nkv{tag}"
        subnet = f"10.213.{os.getpid() % 250}"
        self.host_address, self.address = f"{subnet}.1", f"{subnet}.2"

    def __enter__(self) -> NetworkNamespace:
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.link, "type", "veth", "peer", "name", "eth0", "netns", self.name)
            _ip("addr", "add", f"{self.host_address}/30", "dev", self.link)
            _ip("link", "set", self.link, "up")
            _ip("-n", self.name, "addr", "add", f"{self.address}/30", "dev", "eth0")
            _ip("-n", self.name, "link", "set", "eth0", "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def popen(self, command: list[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.name, *command], **kwargs)

    def cut(self) -> None:
        _ip("link", "set", self.link, "down")

    def __exit__(self, *exc) -> None:
        subprocess.run(["ip", "link", "del", self.link], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
