"""History logs: files that only grow, by records appended one at a time,
each checksummed and chained to the ones before it. Knows bytes only (no
NetKet, no checkpoints; what the records hold is the writer's business).

A reader never reads a log to its end: it reads up to a *position*, what a
writer returned after an append, ``{"file", "id", "end", "records",
"chain"}``: the file's name and id, the byte where its records ended, how
many there were, and the chain value after the last. Appending changes no
byte a position covers, so every position handed out stays readable
however the file grows afterwards, and whatever a crash leaves behind the
last complete record (a torn record is past every position). A log may
continue another: its header names the *parent* position, the records it
continues after (a writer that finds a log's end not where it left it
starts a new log rather than write after bytes no position covers).

Layout (integers little-endian)::

    offset 0    preamble, 32 bytes: MAGIC (8) | version u32 | flags u32 |
                header length u64 | header xxh3-64 u64
    offset 32   header: msgpack {"id": 32 hex digits, "parent": position or
                None, "created": ISO-8601, "nkserde": version}
    ...         records, back to back, each:
                  40 bytes: b"NKHR" | flags u32 | head length u64 |
                            data length u64 | head xxh3-64 u64 | data xxh3-64 u64
                  head: msgpack {"tree": a plain tree, arrays as {"@array": i},
                                 "arrays": [{"dtype", "shape", "offset", "nbytes"}]}
                  data: the arrays' bytes (little-endian, C order) at their offsets

The chain starts at the parent position's ``chain`` (0 without a parent);
after each record it is xxh3-64 of (previous chain, head xxh3-64, data
xxh3-64) as three u64: a position's chain vouches for every record before
it, across parents.

A read checks what the file declares before it allocates anything: the
header and every record head within ``max_header_bytes``, the data of all
records of one read within ``max_load_bytes``, every length within the
position's end; then every checksum, the chain, and the decoded trees
(dtypes from nkserde's table only, every array's bytes equal to its shape,
the nesting of tree_codec). Damage is a CorruptFileError naming the file,
the record and its byte offset.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from ..errors import CorruptFileError, FileWriteError, LoadLimitError, UnregisteredTypeError, UnsupportedVersionError
from . import limits, tree_codec
from .array_write import bytes_of
from .atomic import atomic_write
from .checksum import checksum
from .layout import DTYPES, dtype_name
from .read_failures import MSGPACK_ERRORS, corrupt, read_errors, read_exact

MAGIC = b"\x89NKSHIS\n"  # 8 bytes, like an nkserde file's but not one
VERSION = 1
PREAMBLE = struct.Struct("<8sIIQQ")  # magic, version, flags, header length, header checksum
RECORD = struct.Struct("<4sIQQQQ")  # magic, flags, head length, data length, head checksum, data checksum
RECORD_MAGIC = b"NKHR"
POSITION_KEYS = frozenset({"file", "id", "end", "records", "chain"})
_ID = re.compile(r"^[0-9a-f]{32}$")
_ARRAY_KEYS = frozenset({"dtype", "shape", "offset", "nbytes"})
_MAX_DIMS = 32
_U64 = 1 << 64


class Mismatch(Exception):
    """The log is not where an append expects it: missing, another log
    under its name, or not ending where its last record did. (Not an
    NkserdeError: the writer starts a new log.)"""


@dataclass(frozen=True)
class Record:
    """One encoded record: its bytes and the checksums the chain takes."""

    data: bytes
    head_checksum: int
    data_checksum: int

    def chained(self, previous: int) -> int:
        """The chain value after this record, following ``previous``."""
        return chain(previous, self.head_checksum, self.data_checksum)


def chain(previous: int, head_checksum: int, data_checksum: int) -> int:
    return checksum(struct.pack("<QQQ", previous, head_checksum, data_checksum))


def new_id() -> str:
    """A new log's id: 128 random bits, in hex."""
    return secrets.token_hex(16)


def encode_record(tree) -> Record:
    """``tree`` (a plain tree: dicts, lists, scalars, strings, numpy arrays)
    as one record."""
    arrays: list = []
    encoded = tree_codec.encode(tree, arrays)
    table, parts, offset = [], [], 0
    for array in arrays:
        if not isinstance(array, np.ndarray):
            raise UnregisteredTypeError(f"a history record holds numpy arrays only, not {type(array).__name__}")
        name = dtype_name(array.dtype)  # one a file holds: checked as the tree was encoded
        data = bytes_of(array)
        table.append({"dtype": name, "shape": list(array.shape), "offset": offset, "nbytes": data.nbytes})
        parts.append(data)
        offset += data.nbytes
    head = msgpack.packb({"tree": encoded, "arrays": table}, use_bin_type=True)
    data = b"".join(parts)
    head_checksum, data_checksum = checksum(head), checksum(data)
    return Record(
        RECORD.pack(RECORD_MAGIC, 0, len(head), len(data), head_checksum, data_checksum) + head + data,
        head_checksum,
        data_checksum,
    )


def _header_bytes(file_id: str, parent: dict | None, meta: dict) -> bytes:
    header = msgpack.packb({"id": file_id, "parent": parent, **meta}, use_bin_type=True)
    return PREAMBLE.pack(MAGIC, VERSION, 0, len(header), checksum(header)) + header


def create(path, *, file_id: str, parent: dict | None, record: Record, meta: dict) -> int:
    """A new log at ``path`` continuing ``parent`` (a position, or None) and
    holding ``record``, written atomically: after a crash it is absent or
    complete. Returns its size, the end of ``record``."""
    head = _header_bytes(file_id, parent, meta)
    with atomic_write(Path(path)) as f:
        f.write(head)
        f.write(record.data)
    return len(head) + len(record.data)


def append(path, *, file_id: str, end: int, record: Record) -> int:
    """Appends ``record`` to the log at ``path``, which must be the log
    ``file_id`` ending at byte ``end`` (else :class:`Mismatch`), and makes
    it durable (fsync). Returns the new end. A failure leaves every byte
    before ``end`` as it was (FileWriteError)."""
    path = Path(path)
    try:
        f = open(path, "r+b")
    except FileNotFoundError:
        raise Mismatch("it is missing") from None
    except OSError as exc:
        raise _write_error(path, "opening it", exc) from exc
    with f:
        try:
            with read_errors(path):
                header, _ = _read_header(f, path)
        except (CorruptFileError, UnsupportedVersionError) as exc:
            raise Mismatch(f"its header does not read: {exc}") from None
        except OSError as exc:
            raise _write_error(path, "reading its header", exc) from exc
        if header["id"] != file_id:
            raise Mismatch(f"it is another log (id {header['id']}, expected {file_id})")
        size = os.fstat(f.fileno()).st_size
        if size != end:
            raise Mismatch(f"it holds {size} bytes, its last record ended at byte {end}")
        try:
            f.seek(end)
            f.write(record.data)
            f.flush()
            os.fsync(f.fileno())
        except OSError as exc:
            raise _write_error(path, f"appending {len(record.data)} bytes at byte {end}", exc) from exc
    return end + len(record.data)


def _write_error(path, step: str, exc: OSError) -> FileWriteError:
    error = FileWriteError(
        exc.errno, f"{path}: history log: {step} failed: {exc.strerror or exc} (the records before are untouched)"
    )
    error.filename = str(path)
    return error


# ------------------------------------------------------------------ reading


def _unpack(raw: bytes, path, what: str):
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=True, use_list=True)
    except MSGPACK_ERRORS as exc:
        raise corrupt(path, f"{what} is not valid msgpack ({type(exc).__name__}: {exc})") from None


def _uint(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _U64


def check_position(position, where) -> dict:
    """``position`` if it is one (the keys and types of a position), else
    a CorruptFileError naming ``where``."""
    if (
        not isinstance(position, dict)
        or set(position) != POSITION_KEYS
        or not isinstance(position["file"], str)
        or not isinstance(position["id"], str)
        or not _ID.match(position["id"])
        or not all(_uint(position[k]) for k in ("end", "records", "chain"))
    ):
        raise CorruptFileError(f"{where}: malformed history log position {position!r:.200}")
    return position


def _read_header(f, path) -> tuple[dict, int]:
    size = os.fstat(f.fileno()).st_size
    if size < PREAMBLE.size:
        raise corrupt(path, f"{size} bytes is too short for a history log")
    magic, version, _flags, length, digest = PREAMBLE.unpack(read_exact(f, PREAMBLE.size, path, "preamble"))
    if magic != MAGIC:
        raise corrupt(path, f"bad magic bytes {magic!r}: not an nkserde history log")
    if version > VERSION:
        raise UnsupportedVersionError(
            f"{path}: history log version {version} is newer than this nkserde supports (version {VERSION}); "
            "upgrade nkserde"
        )
    if version < 1:
        raise corrupt(path, f"invalid history log version {version}")
    max_header = limits.current().max_header_bytes
    if length > max_header:
        raise LoadLimitError(
            f"{path}: history log header of {length} bytes is larger than the limit of {max_header} bytes "
            "(nkserde.set_load_limits(max_header_bytes=...) or NKSERDE_MAX_HEADER_BYTES raise it)"
        )
    if PREAMBLE.size + length > size:
        raise corrupt(path, f"header of {length} bytes does not fit a file of {size} bytes")
    raw = read_exact(f, length, path, "header")
    if checksum(raw) != digest:
        raise corrupt(path, "history log header checksum mismatch: the header is damaged")
    header = _unpack(raw, path, "the header")
    if not isinstance(header, dict) or not isinstance(header.get("id"), str) or not _ID.match(header["id"]):
        raise corrupt(path, "the header does not have the history log layout")
    if header.get("parent") is not None:
        check_position(header["parent"], f"{path}: header")
    return header, PREAMBLE.size + length


def read_header(path) -> dict:
    """The validated header of the log at ``path``: ``{"id", "parent", ...}``."""
    path = Path(path)
    with read_errors(path), open(path, "rb") as f:
        return _read_header(f, path)[0]


class Budget:
    """The decoded bytes one read may still allocate (``max_load_bytes``)."""

    def __init__(self, limit: int | None = None):
        self.left = limits.current().max_load_bytes if limit is None else limit

    def take(self, n: int, path, what: str) -> None:
        if n > self.left:
            raise LoadLimitError(
                f"{path}: {what} would bring this read past the limit of {limits.current().max_load_bytes} bytes "
                "(nkserde.set_load_limits(max_load_bytes=...) or NKSERDE_MAX_LOAD_BYTES raise it)"
            )
        self.left -= n


def read_records(
    path, *, file_id: str, end: int | None, records: int | None, chain_start: int, decode=True, budget=None
) -> tuple[list, int]:
    """The first ``records`` records of the log ``file_id`` at ``path``,
    which must end at byte ``end`` (a position's; both None: every record to
    the end of the file), each checked, the chain started at
    ``chain_start``. Returns (their trees, oldest first; or Nones if not
    ``decode``) and the chain after the last: the caller compares it with
    the position's."""
    path = Path(path)
    budget = Budget() if budget is None else budget
    trees = []
    value = chain_start
    with read_errors(path), open(path, "rb", buffering=0) as f:
        header, offset = _read_header(f, path)
        if header["id"] != file_id:
            raise corrupt(path, f"history log id {header['id']}, expected {file_id} (another log under that name)")
        size = os.fstat(f.fileno()).st_size
        stop = size if end is None else end
        if stop > size:
            raise corrupt(path, f"the history log holds {size} bytes; its records should end at byte {stop}")
        i, max_head = 0, limits.current().max_header_bytes
        while (i < records) if records is not None else (offset < stop):
            value = chain(value, *_read_record(f, path, i, offset, stop, max_head, budget, trees if decode else None))
            offset = f.tell()
            i += 1
        if offset != stop:
            raise corrupt(path, f"record {i} should end the log at byte {stop}, it ends at byte {offset}")
    return trees if decode else [None] * i, value


def read_tail(path, position: dict, *, budget=None) -> list:
    """The records after ``position`` in the log it names, at ``path``:
    the trees of the whole ones, oldest first, up to the end of the file or
    the first that does not read (a torn append ends them). No checkpoint
    refers to them and a resume never reads them; they tell what a run did
    that a restart from an earlier position did again. Each record is
    checked as :func:`read_records` checks it; its chain is not (no position
    vouches for them). The file shorter than the position, or another log,
    is a CorruptFileError."""
    path = Path(path)
    budget = Budget() if budget is None else budget
    trees: list = []
    with read_errors(path), open(path, "rb", buffering=0) as f:
        header, _ = _read_header(f, path)
        if header["id"] != position["id"]:
            raise corrupt(path, f"history log id {header['id']}, expected {position['id']} (another log)")
        size, offset = os.fstat(f.fileno()).st_size, position["end"]
        if offset > size:
            raise corrupt(path, f"the history log holds {size} bytes; a position ends at byte {offset}")
        i, max_head = position["records"], limits.current().max_header_bytes
        while offset < size:
            try:
                _read_record(f, path, i, offset, size, max_head, budget, trees)
            except (CorruptFileError, LoadLimitError):
                break  # torn, or damaged: what follows is not told apart from it
            offset = f.tell()
            i += 1
    return trees


def _read_record(f, path, i, offset, stop, max_header, budget, trees) -> tuple[int, int]:
    where = f"record {i} (byte {offset})"
    if offset + RECORD.size > stop:
        raise corrupt(path, f"{where}: runs past byte {stop}, where the log should end")
    f.seek(offset)
    magic, flags, head_length, data_length, head_digest, data_digest = RECORD.unpack(
        read_exact(f, RECORD.size, path, where)
    )
    if magic != RECORD_MAGIC or flags:
        raise corrupt(path, f"{where}: not a history record (magic {magic!r}, flags {flags})")
    if head_length > max_header:
        raise LoadLimitError(
            f"{path}: {where}: a head of {head_length} bytes is larger than the limit of {max_header} bytes "
            "(nkserde.set_load_limits(max_header_bytes=...) raises it)"
        )
    if offset + RECORD.size + head_length + data_length > stop:
        raise corrupt(
            path, f"{where}: {head_length}+{data_length} bytes run past byte {stop}, where the log should end"
        )
    budget.take(data_length, path, f"{where}: {data_length} bytes")
    head = read_exact(f, head_length, path, f"{where}: head")
    if checksum(head) != head_digest:
        raise corrupt(path, f"{where}: head checksum mismatch")
    data = read_exact(f, data_length, path, f"{where}: data")
    if checksum(data) != data_digest:
        raise corrupt(path, f"{where}: data checksum mismatch")
    if trees is not None:
        trees.append(_decode(head, data, path, where))
    return head_digest, data_digest


def _decode(head: bytes, data: bytes, path, where: str):
    head = _unpack(head, path, f"{where}: the head")
    if not isinstance(head, dict) or set(head) != {"tree", "arrays"} or not isinstance(head["arrays"], list):
        raise corrupt(path, f"{where}: the head does not have the record layout")
    arrays = []
    for j, entry in enumerate(head["arrays"]):
        if not isinstance(entry, dict) or set(entry) != _ARRAY_KEYS:
            raise corrupt(path, f"{where}: array {j}: malformed entry")
        dtype, shape, offset, nbytes = (entry[k] for k in ("dtype", "shape", "offset", "nbytes"))
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise corrupt(path, f"{where}: array {j}: unknown dtype {dtype!r:.80}")
        if (
            not isinstance(shape, list)
            or len(shape) > _MAX_DIMS
            or not all(_uint(n) for n in shape)
            or not _uint(offset)
            or not _uint(nbytes)
        ):
            raise corrupt(path, f"{where}: array {j}: malformed shape, offset or size")
        count = math.prod(shape)
        if nbytes != count * DTYPES[dtype].itemsize or offset + nbytes > len(data):
            raise corrupt(
                path,
                f"{where}: array {j} ({dtype}{shape}): {nbytes} bytes at {offset} do not fit its shape or the data",
            )
        try:
            array = np.frombuffer(data, dtype=DTYPES[dtype], count=count, offset=offset).reshape(shape).copy()
        except (ValueError, OverflowError) as exc:
            raise corrupt(path, f"{where}: array {j} ({dtype}{shape}): {exc}") from None
        arrays.append(array)
    try:
        return tree_codec.decode(head["tree"], arrays, set())
    except (ValueError, RecursionError) as exc:
        raise corrupt(path, f"{where}: the tree is malformed: {exc}") from None
