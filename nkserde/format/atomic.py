"""Atomic file replacement.

A save writes a temporary file beside the target, fsyncs it, renames it over
the target and fsyncs the directory. A crash at any point leaves either the
old file or the new one at the target, never a mixture. The temporary name
records host and pid, so the next save to the same directory can recognise
the leftovers of a save whose process has died and remove them (those of
another host, whose processes cannot be checked from here, are removed by
the run that holds the checkpoint directory's lock).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from ..errors import FileWriteError, NkserdeError

TEMP_MARK = ".nkserde-tmp"
# temporary files of this process that a failed save could not remove (the
# unlink failed too): not in flight, so the next save removes them
_leftovers: set[Path] = set()


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


def temp_owner(name: str) -> tuple[str, str, int] | None:
    """(target name, host, pid) of a temporary file's name as
    :func:`temp_name` makes it, None for any other name."""
    if not (name.startswith(".") and name.endswith(TEMP_MARK)):
        return None
    parts = name[1 : -len(TEMP_MARK)].rsplit("~", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


def remove_stale_temps(directory: Path, *, other_hosts: bool = False, keep: tuple[str, ...] = ()) -> list[Path]:
    """Removes temporary files left in ``directory`` by dead processes of this
    host; files of live processes are left alone. ``other_hosts``: also
    every temporary file of another host, but those of targets named
    ``keep`` or ``keep + "."...`` (the caller holds the directory's lock:
    no other host's run writes there, but one may be trying to take it)."""
    removed = []
    for leftover in sorted(_leftovers):
        if leftover.parent == Path(directory):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
                removed.append(leftover)
            if not leftover.exists():
                _leftovers.discard(leftover)
    host = socket.gethostname()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        owner = temp_owner(entry.name)
        if owner is None:
            continue
        target, writer, pid = owner
        if writer != host:
            if not other_hosts or any(target == k or target.startswith(k + ".") for k in keep):
                continue
        elif pid == os.getpid() or pid_alive(pid):  # our own pid: possibly a save in flight in another thread
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


def write_error(target, step: str, exc: OSError, untouched: bool = True) -> FileWriteError:
    """The FileWriteError of a save of ``target`` whose ``step`` failed."""
    state = (
        "the file at the target is untouched"
        if untouched
        else "the new file is in place but may not survive a crash of the machine"
    )
    error = FileWriteError(exc.errno, f"{target}: save failed while {step}: {exc.strerror or exc} ({state})")
    error.filename = str(target)
    return error


def remove_temp(temp: Path) -> None:
    """Removes a failed save's temporary file; if even that fails, the next
    save to its directory tries again."""
    try:
        os.unlink(temp)
    except FileNotFoundError:
        pass
    except OSError:
        _leftovers.add(Path(temp))


@contextlib.contextmanager
def atomic_write(target: Path):
    """Yields a binary file object; on clean exit its content replaces
    ``target`` atomically and durably. On an exception the target is
    untouched and the temporary file removed; an OSError of a write, fsync
    or rename becomes a FileWriteError naming the target and the step."""
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
    try:
        f = open(temp, "xb")
    except OSError as exc:
        raise write_error(target, "creating its temporary file", exc) from exc
    step = "writing"
    try:
        yield f
        step = "writing"
        f.flush()
        step = "syncing the file to disk (fsync)"
        os.fsync(f.fileno())
        f.close()
        step = "renaming the temporary file over the target"
        os.replace(temp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            f.close()
        remove_temp(temp)
        if isinstance(exc, OSError) and not isinstance(exc, NkserdeError):
            raise write_error(target, step, exc) from exc
        raise
    try:
        fsync_directory(directory)
    except OSError as exc:
        raise write_error(target, "syncing the directory (fsync)", exc, untouched=False) from exc
