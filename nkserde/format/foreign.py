"""Files that are not nkserde's, told apart by their content: the files
NetKet writes, which ``nkserde.load`` reads (flax ``.mpack``, nqxpack), and
what else a user may hand nkserde by mistake (text, numpy's ``.npy`` and
``.npz``, HDF5, a pickle). One description of a file for every reader:
``load``, ``verify``, ``info`` and the command line say the same of it.

Without NetKet or JAX (the command line's header readers use it): NetKet's
files are read as flax's msgpack encoding by ``flax_msgpack``, within the
load limits (``bounded``); nothing a file names is imported.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import CorruptFileError
from . import bounded, flax_msgpack
from .layout import MAGIC

ZIP = b"PK\x03\x04"
NETKET_METADATA = "metadata.json"  # what makes a zip (or a directory) an nqxpack file
_MAX_METADATA_BYTES = 1 << 20  # nqxpack's is a few hundred bytes
STATE_MEMBERS = ("assets//state.msgpack", "assets/state.msgpack", "state/state.msgpack")
_HEAD = 16
# other files' first bytes (HDF5's and PNG's start with 0x89, as a msgpack fixmap does)
_SIGNATURES = (
    (b"\x93NUMPY", "a numpy .npy file"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file (NetKet's HDF5Log writes them)"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
)

# what to do with a file that is not nkserde's, in every message that refuses one
READS = (
    f"nkserde reads the files nkserde.save and nkserde.Checkpoint write (they start with {MAGIC!r}) "
    "and, with nkserde.load, NetKet's .mpack and nqxpack files"
)


def head(path, n: int = _HEAD) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def _pickle(data: bytes) -> bool:
    return len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5


def _nkserde(data: bytes) -> bool:
    """Starts as an nkserde file (or as much of one as there is)."""
    return bool(data) and data[: len(MAGIC)] == MAGIC[: len(data)]


def _msgpack_map(data: bytes) -> bool:
    """Starts as flax's to_bytes of a state dict: a msgpack map (fixmap,
    map16, map32)."""
    if not data or not (0x80 <= data[0] <= 0x8F or data[0] in (0xDE, 0xDF)):
        return False
    # nkserde's magic, HDF5's and PNG's start with 0x89, a fixmap's first byte too
    others = any(data.startswith(signature[: len(data)]) for signature, _ in _SIGNATURES)
    return not (others or _pickle(data) or _nkserde(data))


def netket_kind(path) -> str | None:
    """``"nqxpack"`` (a zip, or a directory, with NetKet's ``metadata.json``;
    a zip that does not open, whose reader says why), ``"mpack"`` (flax
    msgpack) or None, from the content of the file."""
    path = Path(path)
    if path.is_dir():
        return "nqxpack" if (path / NETKET_METADATA).is_file() else None
    data = head(path, len(MAGIC))
    if data[:4] == ZIP:  # a zip that opens without NetKet's metadata is someone else's (numpy's .npz)
        return None if _nqxpack_metadata(path) is False else "nqxpack"
    if _msgpack_map(data):
        return "mpack"
    return None


def _text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        try:  # a multi-byte character cut at the end of what was read
            text = data[:-3].decode("utf-8")
        except UnicodeDecodeError:
            return None
    if text and all(c.isprintable() or c in "\t\r\n" for c in text):
        return text
    return None


def _nqxpack_metadata(path: Path) -> bool | str:
    """Whether the zip (or directory) holds NetKet's metadata.json, of
    format "NetKet"; why not, if it cannot be read."""
    try:
        with bounded.Archive(path) as archive:
            if NETKET_METADATA not in archive:
                return False
            meta = bounded.parse_json(archive.read(NETKET_METADATA, _MAX_METADATA_BYTES), f"{path}")
    except (CorruptFileError, OSError) as exc:
        return str(exc).removeprefix(f"{path}: ")
    return isinstance(meta, dict) and meta.get("format") == "NetKet"


def describe(path) -> str:
    """What the file at ``path`` is, as far as its content says, for a
    message: "a file NetKet wrote (flax msgpack, an .mpack)", "text
    ('Energy ...')", "a zip archive without NetKet's metadata.json (numpy's
    .npz is one)"..."""
    path = Path(path)
    if path.is_dir():
        return "a directory"
    data = head(path)
    if not data:
        return "an empty file (0 bytes)"
    if data.startswith(ZIP):
        netket = _nqxpack_metadata(path)
        if netket is True:
            return "a file NetKet wrote (nqxpack, a zip archive)"
        if netket is False:
            return f"a zip archive without NetKet's {NETKET_METADATA}, so not an nqxpack file (numpy's .npz is one)"
        return f"a zip archive that cannot be read ({netket})"
    for signature, what in _SIGNATURES:
        if data.startswith(signature):
            return what
    if _pickle(data):
        return "a Python pickle"
    if _msgpack_map(data):
        return "a file NetKet wrote (flax msgpack, an .mpack)"
    text = _text(data)
    if text is not None:
        first = text.strip().splitlines()[0] if text.strip() else ""
        return f"text ({first[:32]!r}{'...' if len(first) > 32 else ''})" if first else "blank text"
    return f"a file that starts with the bytes {data[:8]!r}"


def not_nkserde(path) -> CorruptFileError:
    """The error of a file that is not an nkserde file: what it is, what
    nkserde reads, and for a file of NetKet's what reads it."""
    what = describe(path)
    if what.startswith("a file NetKet wrote"):
        return CorruptFileError(
            f"{path}: {what}, not an nkserde file: it has no checksums or schema versions; "
            "nkserde.load(template, path) reads it into an MCState, a FullSumState or a variables "
            "dict, and nkserde inspect shows what it holds"
        )
    return CorruptFileError(f"{path}: not an nkserde file: {what}; {READS}")


def read_netket_state(path, allowance: int):
    """The flax state dict in the NetKet file at ``path``, reading at most
    ``allowance`` bytes of it (a file or member that declares more is
    refused before it is read or inflated)."""
    path = Path(path)
    if netket_kind(path) == "nqxpack":
        with bounded.Archive(path) as archive:
            meta = None
            if NETKET_METADATA in archive:
                meta = bounded.parse_json(
                    archive.read(NETKET_METADATA, _MAX_METADATA_BYTES), f"{path}: member {NETKET_METADATA}"
                )
            if not isinstance(meta, dict) or meta.get("format") != "NetKet":
                raise not_nkserde(path)
            member = next((m for m in STATE_MEMBERS if m in archive), None)
            if member is None:
                names = archive.names()
                raise CorruptFileError(f"{path}: nqxpack file without a state member (has {sorted(names)[:6]})")
            return flax_msgpack.restore(archive.read(member, allowance), f"{path}: member {member}")
    return flax_msgpack.restore(bounded.read_capped(path, allowance, "NetKet file"), f"{path}")


def holds(state) -> str:
    """What a NetKet file's state dict is of, in words."""
    if isinstance(state, dict) and "sampler_state" in state:
        return "an MCState (variables, sampler state, sample counts)"
    if isinstance(state, dict) and "variables" in state:
        return "a variational state's variables (a FullSumState's, or an MCState's)"
    return "variables (parameters) alone, as JsonLog(save_params=True) writes them"
