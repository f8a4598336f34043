"""Reading the small and foreign files a user can be handed, within limits:
JSON side files (``fingerprint.json``), and the members of zip archives
and of their plain-directory form (nqxpack's ``.nk``).

Every function here reads at most ``limit`` bytes into memory, whatever the
file declares: sizes are checked before anything is read or inflated, and a
member that inflates past its declared size is stopped there (zipfile stops
at the declared size and checks the CRC). Nothing is extracted, so member
names like ``../x`` never reach the file system. Errors are
:class:`~nkserde.errors.CorruptFileError` (:class:`LoadLimitError` past a
limit) naming the file and the member.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import struct
import zipfile
import zlib
from pathlib import Path

from ..errors import CorruptFileError, FileReadError, LoadLimitError

# Archives nkserde reads hold a handful of members (nqxpack: 3 to 10); the
# central directory of a hostile one could claim millions, each parsed into
# a Python object before any member is read.
MAX_ARCHIVE_MEMBERS = 4096
_CHUNK = 1 << 20
_END_OF_DIRECTORY = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"


def read_capped(path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file at ``path``, refused with
    LoadLimitError if it holds more than ``limit`` (checked on its size and
    again while reading: a file that grows, or a device, is stopped at the
    limit)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise CorruptFileError(f"{path}: the {what} is not a regular file")
            _check_size(path, what, info.st_size, limit)
            # read what fstat says and one byte more, never the limit: a
            # read of n bytes allocates n at once (the default limit is the
            # machine's memory, a MemoryError where less is free)
            data = f.read(info.st_size + 1)
            if len(data) > info.st_size:  # it grew since: on, in chunks, up to the limit
                parts, total = [data], len(data)
                while total <= limit and (chunk := f.read(min(_CHUNK, limit + 1 - total))):
                    parts.append(chunk)
                    total += len(chunk)
                data = b"".join(parts)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise FileReadError(exc.errno, f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    _check_size(path, what, len(data), limit)
    return data


def read_json(path, limit: int, what: str = "JSON file"):
    """The JSON value in the file at ``path`` (at most ``limit`` bytes)."""
    return parse_json(read_capped(path, limit, what), f"{path}", what)


def parse_json(data: bytes, where: str, what: str = "JSON"):
    try:
        return json.loads(data)
    except RecursionError:  # json's decoder counts its nesting: no crash, this error
        raise LoadLimitError(f"{where}: the {what} is nested deeper than Python's recursion limit") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(f"{where}: the {what} is not valid JSON: {exc}") from None


class Archive:
    """The members of a zip file, or of a directory laid out like one
    (``assets//state.msgpack`` is ``assets/state.msgpack`` inside it), read
    within limits. Use as a context manager."""

    def __init__(self, path):
        self.path = Path(path)
        self._zip = None
        if self.path.is_dir():
            return
        try:
            self._check_member_count()
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, struct.error, EOFError, OverflowError) as exc:
            raise CorruptFileError(f"{self.path}: unreadable zip file: {exc}") from None
        except (NotImplementedError, RuntimeError) as exc:  # zipfile: a version or feature it lacks, encryption
            raise CorruptFileError(f"{self.path}: a zip file nkserde cannot read: {exc}") from None
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise FileReadError(exc.errno, f"{self.path}: cannot read the zip file: {exc.strerror or exc}") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._zip is not None:
            self._zip.close()

    def __contains__(self, name: str) -> bool:
        if self._zip is None:  # what is there but is not a regular file is refused on read
            return self._member_path(name).exists()
        try:
            self._zip.getinfo(name)
        except KeyError:
            return False
        return True

    def names(self) -> list[str]:
        """The members' names (of a directory: its entries, at most
        MAX_ARCHIVE_MEMBERS of them, not walked)."""
        if self._zip is None:
            return sorted(p.name for p in itertools.islice(self.path.iterdir(), MAX_ARCHIVE_MEMBERS))
        return self._zip.namelist()

    def read(self, name: str, limit: int) -> bytes:
        """Member ``name``, at most ``limit`` bytes inflated."""
        where = f"{self.path}: member {name}"
        if self._zip is None:
            return read_capped(self._member_path(name), limit, f"member {name} of {self.path}")
        try:
            info = self._zip.getinfo(name)
        except KeyError:
            raise CorruptFileError(f"{self.path}: no member {name}") from None
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise CorruptFileError(f"{where}: compression method {info.compress_type} (stored or deflate expected)")
        _check_size(self.path, f"member {name}", info.file_size, limit)
        out = bytearray()
        try:
            with self._zip.open(info) as f:
                # zipfile reads no more than the declared size and checks the CRC at its end
                while chunk := f.read(min(_CHUNK, limit + 1 - len(out))):
                    out += chunk
                    if len(out) > limit:
                        break
        except (zipfile.BadZipFile, ValueError, EOFError, struct.error, OSError) as exc:
            raise CorruptFileError(f"{where}: unreadable: {exc}") from None
        except (zlib.error, NotImplementedError, RuntimeError) as exc:  # a damaged deflate stream; zipfile's refusals
            raise CorruptFileError(f"{where}: unreadable: {type(exc).__name__}: {exc}") from None
        _check_size(self.path, f"member {name}", len(out), limit)
        if len(out) != info.file_size:
            raise CorruptFileError(f"{where}: {len(out)} bytes inflated, {info.file_size} declared")
        return bytes(out)

    def _member_path(self, name: str) -> Path:
        parts = [p for p in name.split("/") if p]
        if any(p in (".", "..") for p in parts) or not parts:
            raise CorruptFileError(f"{self.path}: member name {name!r} leaves the directory")
        return self.path.joinpath(*parts)

    def _check_member_count(self) -> None:
        """Refuses a central directory that claims more than
        MAX_ARCHIVE_MEMBERS entries before zipfile parses it."""
        with open(self.path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            tail_size = min(size, 22 + 0xFFFF)  # the end record and its longest comment
            f.seek(size - tail_size)
            tail = f.read(tail_size)
        at = tail.rfind(_END_OF_DIRECTORY)
        if at < 0 or at + 22 > len(tail):
            return  # zipfile says what is wrong
        entries = struct.unpack_from("<H", tail, at + 10)[0]
        if entries == 0xFFFF and at >= 20 and tail[at - 20 : at - 16] == _ZIP64_LOCATOR:
            record = struct.unpack_from("<Q", tail, at - 20 + 8)[0]
            with open(self.path, "rb") as f:
                f.seek(record)
                head = f.read(56)
            if len(head) == 56 and head[:4] == b"PK\x06\x06":
                entries = struct.unpack_from("<Q", head, 32)[0]
        if entries > MAX_ARCHIVE_MEMBERS:
            raise LoadLimitError(f"{self.path}: the zip file claims {entries} members, more than {MAX_ARCHIVE_MEMBERS}")


def _check_size(path: Path, what: str, size: int, limit: int) -> None:
    if size > limit:
        raise LoadLimitError(
            f"{path}: the {what} holds {size} bytes, more than this load allows ({limit} bytes; "
            f"see nkserde.set_load_limits)"
        )
