"""Atomic file replacement.

A save writes a temporary file beside the target, fsyncs it, renames it over
the target and fsyncs the directory. A crash at any point leaves either the
old file or the new one at the target, never a mixture. The temporary name
records host and pid, so the next save to the same directory can recognise
the leftovers of a save whose process has died and remove them.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

TEMP_MARK = ".nkserde-tmp"


def temp_name(name: str, host: str | None = None, pid: int | None = None) -> str:
    """The temporary name of a save of file ``name`` by process ``pid`` of
    ``host`` (default: this one), as :func:`remove_stale_temps` parses it."""
    host = socket.gethostname() if host is None else host
    pid = os.getpid() if pid is None else pid
    return f".{name}~{host}~{pid}{TEMP_MARK}"


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temps(directory: Path) -> list[Path]:
    """Removes temporary files left in ``directory`` by dead processes of this
    host; files of live processes and of other hosts are left alone."""
    removed = []
    host = socket.gethostname()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(".") and name.endswith(TEMP_MARK)):
            continue
        parts = name[: -len(TEMP_MARK)].rsplit("~", 2)
        if len(parts) != 3 or parts[1] != host or not parts[2].isdigit():
            continue
        pid = int(parts[2])
        # our own pid: possibly a save in flight in another thread
        if pid == os.getpid() or pid_alive(pid):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(target: Path):
    """Yields a binary file object; on clean exit its content replaces
    ``target`` atomically and durably. On an exception the target is
    untouched and the temporary file removed."""
    target = Path(target)
    directory = target.parent if str(target.parent) else Path(".")
    remove_stale_temps(directory)
    temp = directory / temp_name(target.name)
    # A second save of the same target from another thread of this process
    # would share the name: make it unique within the process too.
    counter = 0
    while temp.exists():
        counter += 1
        temp = directory / temp_name(f"{target.name}.{counter}")
    f = open(temp, "xb")
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(temp, target)
        fsync_directory(directory)
    except BaseException:
        f.close()
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
