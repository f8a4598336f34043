"""NetKet's own files are untrusted input: a flax ``.mpack`` or an nqxpack
``.nk`` (zip or directory) is read within the load limits, like nkserde's
files. Sizes are checked before anything is read or inflated; a member is
inflated no further than it declares; structure is bounded; every error
names the file and the member (format/bounded.py, format/flax_msgpack.py)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import jax
import msgpack
import numpy as np
import pytest
from flax import serialization

import nkserde
from nkserde.errors import CorruptFileError, LoadLimitError, NkserdeError
from builders import mc_state
from nkserde.format import bounded, flax_msgpack

FIXTURES = Path(__file__).parent / "fixtures"
NK_FILE = FIXTURES / "netket-files-3.23.0" / "mcstate.nk"
MPACK = FIXTURES / "netket-files-3.23.0" / "mcstate.mpack"
STATE = "assets//state.msgpack"
BOMB_BYTES = 3 * 10**9


def _zeros_member_prefix(n: int) -> bytes:
    """The start of a flax msgpack state whose one array is ``n`` zero
    bytes (the bytes themselves follow): ``{"variables": {"params": {"a":
    uint8[n]}}}``."""
    array = b"\x93" + msgpack.packb([n]) + msgpack.packb("uint8") + b"\xc6" + struct.pack(">I", n)
    ext = b"\xc9" + struct.pack(">I", len(array) + n) + b"\x01"
    return (
        b"\x81"
        + msgpack.packb("variables")
        + b"\x81"
        + msgpack.packb("params")
        + b"\x81"
        + msgpack.packb("a")
        + ext
        + array
    )


def write_bomb(path: Path, n: int) -> None:
    """nqxpack's metadata.json and object.json beside a deflated state
    member of ``n`` zero bytes (3 GB: about 3 MB on disk)."""
    with zipfile.ZipFile(NK_FILE) as real, zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in ("metadata.json", "object.json"):
            z.writestr(name, real.read(name))
        info = zipfile.ZipInfo(STATE)
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            f.write(_zeros_member_prefix(n))
            chunk = bytes(64 << 20)
            for start in range(0, n, len(chunk)):
                f.write(chunk[: min(len(chunk), n - start)])


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    path = tmp_path_factory.mktemp("bomb") / "bomb.nk"
    write_bomb(path, BOMB_BYTES)
    return path


def test_the_bomb_is_small_on_disk_and_declares_3_gb(bomb):
    assert bomb.stat().st_size < 20 << 20
    with zipfile.ZipFile(bomb) as z:
        assert z.getinfo(STATE).file_size > BOMB_BYTES


def test_a_deflate_bomb_is_refused_before_it_is_inflated(bomb):
    """In a subprocess, so that its peak memory is its own: the load fails
    with a LoadLimitError naming the file and the member, and the peak
    resident memory grows by far less than the 3 GB the member inflates to
    (before: 6.9 GB)."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import nkserde
        from builders import mc_state
        template = mc_state()
        def status(field):  # VmHWM: this process's peak (ru_maxrss would carry pytest's over exec)
            return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1]) * 1024
        before = status("VmRSS")
        try:
            nkserde.load(template, {str(bomb)!r})
            out = {{"error": None}}
        except Exception as exc:
            out = {{"error": type(exc).__name__, "message": str(exc)}}
        out["before"] = before
        out["peak"] = status("VmHWM")
        print(json.dumps(out))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["error"] == "LoadLimitError", out
    assert str(bomb) in out["message"] and STATE in out["message"] and str(BOMB_BYTES)[:4] in out["message"]
    assert "what a MCState template can use" in out["message"]  # not a limit set_load_limits raises
    # the imports' own peak is in "peak" too: what the load added is far below 3 GB
    assert out["peak"] - out["before"] < 200 << 20, out


def test_the_load_limit_applies_to_netket_files(tmp_path):
    """NKSERDE_MAX_LOAD_BYTES / set_load_limits bound NetKet files too (before: ignored)."""
    nkserde.set_load_limits(max_load_bytes=512)
    try:
        for path in (MPACK, NK_FILE):
            with pytest.raises(LoadLimitError, match=f"{path.name}.*more than this load allows \\(512 bytes"):
                nkserde.load(mc_state(), path)
    finally:
        nkserde.set_load_limits()
    assert nkserde.load(mc_state(), NK_FILE).n_samples == 64


def test_a_member_that_inflates_past_its_declared_size_is_stopped(tmp_path):
    """A central directory and local header that lie (100 MB of zeros
    declared as 1000 bytes): zipfile inflates no further than declared and
    the CRC, or the size, fails: an error naming the member."""
    path = tmp_path / "liar.nk"
    n = 100 << 20
    with zipfile.ZipFile(NK_FILE) as real, zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in ("metadata.json", "object.json"):
            z.writestr(name, real.read(name))
        z.writestr(STATE, _zeros_member_prefix(n) + bytes(n))
    data = bytearray(path.read_bytes())
    true_size = len(_zeros_member_prefix(n)) + n
    for signature, offset in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):  # central, local: uncompressed size
        at = -1
        while (at := data.find(signature, at + 1)) >= 0:
            if struct.unpack_from("<I", data, at + offset)[0] == true_size:
                struct.pack_into("<I", data, at + offset, 1000)
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as z:
        assert z.getinfo(STATE).file_size == 1000
    with pytest.raises(CorruptFileError, match=f"liar.nk: member {STATE}"):
        nkserde.load(mc_state(), path)


def test_a_central_directory_claiming_too_many_members_is_refused(tmp_path):
    path = tmp_path / "many.nk"
    data = bytearray(NK_FILE.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, end + 8, 0xFFFE, 0xFFFE)  # entries on this disk, in all
    path.write_bytes(bytes(data))
    with pytest.raises(
        LoadLimitError, match=f"many.nk: the zip file claims 65534 members, more than {bounded.MAX_ARCHIVE_MEMBERS}"
    ):
        nkserde.load(mc_state(), path)


def test_members_with_other_names_are_never_extracted(tmp_path):
    """A member named ../x beside the real ones: nothing is written; the file loads."""
    path = tmp_path / "extra.nk"
    with zipfile.ZipFile(NK_FILE) as real, zipfile.ZipFile(path, "w") as z:
        for info in real.infolist():
            z.writestr(info, real.read(info))
        z.writestr("../x", b"not for the file system")
    before = sorted(os.listdir(tmp_path.parent))
    loaded = nkserde.load(mc_state(), path)
    assert loaded.n_samples == 64 and sorted(os.listdir(tmp_path.parent)) == before


def _unzipped(tmp_path) -> Path:
    directory = tmp_path / "state.nk"
    with zipfile.ZipFile(NK_FILE) as z:
        for info in z.infolist():
            target = directory.joinpath(*[p for p in info.filename.split("/") if p])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))
    return directory


def test_the_directory_form_of_an_nqxpack_file_loads_like_the_zip(tmp_path):
    directory = _unzipped(tmp_path)
    from_directory, from_zip = nkserde.load(mc_state(), directory), nkserde.load(mc_state(), NK_FILE)
    for a, b in zip(jax.tree_util.tree_leaves(from_directory.variables), jax.tree_util.tree_leaves(from_zip.variables)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert np.asarray(from_directory.sampler_state.σ).tobytes() == np.asarray(from_zip.sampler_state.σ).tobytes()


def test_a_directory_member_that_is_not_a_regular_file_is_refused(tmp_path):
    """A state member linked to /dev/zero (endless) or of the wrong size."""
    directory = _unzipped(tmp_path)
    state = directory / "assets" / "state.msgpack"
    state.unlink()
    state.symlink_to("/dev/zero")
    with pytest.raises(CorruptFileError, match="state.msgpack of .*state.nk is not a regular file"):
        nkserde.load(mc_state(), directory)


def test_the_flax_reader_equals_flax_on_netket_files():
    for path in sorted(FIXTURES.glob("netket-files-*/*.mpack")):
        ours, flax = (
            flax_msgpack.restore(path.read_bytes(), str(path)),
            serialization.msgpack_restore(path.read_bytes()),
        )
        assert _flat(ours) == _flat(flax), path


def test_chunked_arrays_are_reassembled(monkeypatch):
    monkeypatch.setattr(serialization, "MAX_CHUNK_SIZE", 64)
    tree = {"big": np.arange(100.0).reshape(10, 10), "small": np.ones(3, np.complex128), "n": 3, "z": 1 + 2j}
    data = serialization.msgpack_serialize(tree)
    assert b"__msgpack_chunked_array__" in data
    assert _flat(flax_msgpack.restore(data, "x")) == _flat(tree)


@pytest.mark.parametrize(
    "payload, match",
    [
        (msgpack.packb({"a": msgpack.ExtType(1, msgpack.packb([[2], "object", b"\0" * 16]))}), "dtype b'object'"),
        (
            msgpack.packb({"a": msgpack.ExtType(1, msgpack.packb([[3], "float64", b"\0" * 16]))}),
            r"float64\[3\] array with 16 bytes",
        ),
        (msgpack.packb({"a": msgpack.ExtType(1, msgpack.packb([[-1], "float64", b""]))}), "shape"),
        (msgpack.packb({"a": msgpack.ExtType(1, msgpack.packb([2, "float64"]))}), r"not \[shape, dtype, bytes\]"),
        (msgpack.packb({"a": msgpack.ExtType(9, b"")}), "extension type 9"),
        (msgpack.packb({"a": msgpack.ExtType(2, msgpack.packb(["x", 1]))}), "complex"),
        (b"\x81\xa1a" + b"\x91" * 200 + b"\xc0", "nested deeper than 128"),
        (b"\x81\xa1a" + b"\x91" * 5000 + b"\xc0", "StackError"),
        (msgpack.packb({"__msgpack_chunked_array__": True, "shape": {"0": 5}, "chunks": {}}), "chunks"),
        (msgpack.packb({"a": 1})[:-1], "not a readable flax msgpack"),
        (msgpack.packb({"a": 1, 7: 2}), "a map key that is not text: 7"),
    ],
)
def test_malformed_flax_msgpack_is_a_corrupt_file_error(payload, match):
    with pytest.raises(CorruptFileError, match=f"where: .*{match}"):
        flax_msgpack.restore(payload, "where")


def test_the_number_of_entries_is_bounded(monkeypatch):
    monkeypatch.setattr(flax_msgpack, "MAX_ITEMS", 1000)
    with pytest.raises(LoadLimitError, match="where: more than 1000 msgpack entries"):
        flax_msgpack.restore(msgpack.packb({"a": [None] * 2000}), "where")


def test_a_damaged_run_fingerprint_is_a_clear_error(tmp_path):
    from nkserde.checkpoint_files.directory import RunDirectory

    files = RunDirectory(tmp_path)
    for text, error, match in (
        ("{not json", CorruptFileError, "fingerprint.json: the run fingerprint is not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, LoadLimitError, "fingerprint.json: the run fingerprint is nested deeper"),
        ("[1, 2]", CorruptFileError, "fingerprint.json: the run fingerprint is not a JSON object"),
    ):
        (tmp_path / "fingerprint.json").write_text(text)
        with pytest.raises(error, match=match):
            files.read_fingerprint()
    nkserde.set_load_limits(max_header_bytes=64)
    try:
        (tmp_path / "fingerprint.json").write_text(json.dumps({"k": "v" * 100}))
        with pytest.raises(LoadLimitError, match="fingerprint.json: the run fingerprint holds 109 bytes"):
            files.read_fingerprint()
    finally:
        nkserde.set_load_limits()
    assert issubclass(LoadLimitError, NkserdeError)


def test_a_bomb_in_a_copied_checkpoint_directory_is_refused_like_a_file(tmp_path, bomb):
    """nkserde.load of a directory: a NetKet directory is told from a
    Checkpoint directory by its metadata.json, and bounded the same way."""
    directory = tmp_path / "bomb.nk"
    directory.mkdir()
    with zipfile.ZipFile(bomb) as z:
        for name in ("metadata.json", "object.json"):
            (directory / name).write_bytes(z.read(name))
    (directory / "assets").mkdir()
    with open(directory / "assets" / "state.msgpack", "wb") as f:
        f.truncate(BOMB_BYTES)  # sparse: 3 GB declared, nothing on disk
    with pytest.raises(LoadLimitError, match="state.msgpack of .*bomb.nk holds 3000000000 bytes"):
        nkserde.load(mc_state(), directory)
    shutil.rmtree(directory)


def _flat(tree, prefix=""):
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}/{k}"))
        return out
    if isinstance(tree, (np.ndarray, np.generic)):
        return {prefix: (np.asarray(tree).dtype.str, np.shape(tree), np.asarray(tree).tobytes())}
    return {prefix: tree}


def test_a_small_file_under_a_huge_limit_reads_its_size_not_the_limit(tmp_path):
    # found: read_capped read limit + 1 bytes at once, and a read allocates
    # what it asks for: under the default limit (the machine's memory)
    # `nkserde inspect x.mpack` raised MemoryError on a machine with less free
    from nkserde.format import bounded

    path = tmp_path / "small"
    path.write_bytes(b"x" * 1000)
    assert bounded.read_capped(path, 1 << 60) == b"x" * 1000
    with pytest.raises(nkserde.errors.LoadLimitError):
        bounded.read_capped(path, 999)


def test_a_file_that_grows_while_read_is_stopped_at_the_limit(tmp_path, monkeypatch):
    from nkserde.format import bounded

    path = tmp_path / "growing"
    path.write_bytes(b"x" * 10)
    real_fstat = os.fstat

    def fstat_then_grow(fd):  # the size fstat saw, then the file grows
        info = real_fstat(fd)
        with open(path, "ab") as f:
            f.write(b"y" * 5000)
        return info

    monkeypatch.setattr(bounded.os, "fstat", fstat_then_grow)
    with pytest.raises(nkserde.errors.LoadLimitError):
        bounded.read_capped(path, 4000)
