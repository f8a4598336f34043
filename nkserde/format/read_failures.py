"""How reading a file fails: damage is a CorruptFileError naming the file
and what failed (:func:`corrupt`, :func:`read_exact`), an error of the
operating system a FileReadError naming the file (:func:`read_errors`).
Shared by the readers of nkserde files and of history logs."""

from __future__ import annotations

import contextlib

import msgpack

from ..errors import CorruptFileError, FileReadError, NkserdeError


@contextlib.contextmanager
def read_errors(path):
    """An OSError while reading ``path`` (EIO of a failing disk or network
    file system, a permission) becomes a FileReadError naming the file; a
    missing file stays FileNotFoundError."""
    try:
        yield
    except (FileNotFoundError, NkserdeError):
        raise
    except OSError as exc:
        error = FileReadError(exc.errno, f"{path}: reading the file failed: {exc.strerror or exc}")
        error.filename = str(path)
        raise error from exc


# What msgpack raises on bytes that are not what it was asked to read:
# its own errors (FormatError, StackError, ExtraData, OutOfData, ...),
# ValueError (a key it refuses), TypeError (an unhashable key) and
# OverflowError (an integer out of range): all mean damage.
MSGPACK_ERRORS = (msgpack.UnpackException, ValueError, TypeError, OverflowError)


def corrupt(path, what) -> CorruptFileError:
    return CorruptFileError(f"{path}: {what}")


def read_exact(f, n: int, path, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise corrupt(path, f"truncated while reading {what} ({len(data)} of {n} bytes)")
    return data
