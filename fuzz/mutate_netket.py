"""Structure-aware mutations of NetKet's own files (flax ``.mpack`` and
nqxpack ``.nk`` zips), beside atheris's byte mutations.

A zip is parsed and written back with what a damaged or hostile writer
could change: the state member's msgpack rewritten (array shapes, dtypes
and lengths that lie, odd values, deep nesting, chunked arrays that do not
add up), declared sizes and counts that lie in the central directory, the
local headers or the end record, members that overlap (two entries over
the same bytes), names like ``../x``, a small deflate bomb, zip64 records.
An ``.mpack`` gets the same msgpack mutations, and lengths that lie in its
raw bytes.

``mutate(data, rng)`` returns new bytes, or None if ``data`` is neither
(the caller falls back to byte mutations). No dependency on atheris:
tests/test_fuzz_regressions.py uses it too.
"""

from __future__ import annotations

import io
import random
import struct
import warnings
import zipfile

import msgpack

from mutate import DTYPES, INTS, ODD, _value

STATE = "assets//state.msgpack"
_CENTRAL, _LOCAL, _END = b"PK\x01\x02", b"PK\x03\x04", b"PK\x05\x06"


# --------------------------------------------------------------------------- msgpack


def _decode(data: bytes):
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return None


def _nodes(tree, out, parent=None, key=None, depth=0):
    out.append((parent, key, tree))
    if depth > 40:
        return out
    if isinstance(tree, dict):
        for k, v in tree.items():
            _nodes(v, out, tree, k, depth + 1)
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            _nodes(v, out, tree, i, depth + 1)
    return out


def _lying_array(rng) -> msgpack.ExtType:
    shape = [rng.choice(INTS) if rng.random() < 0.3 else rng.randrange(0, 9) for _ in range(rng.randrange(0, 4))]
    dtype = rng.choice(DTYPES) if rng.random() < 0.5 else "float64"
    buffer = bytes(rng.randrange(0, 65) if rng.random() < 0.7 else 8 * rng.randrange(0, 9))
    fields = [shape, dtype, buffer] if rng.random() < 0.9 else rng.choice([[shape, dtype], [shape], ODD[:3], {}])
    try:
        return msgpack.ExtType(rng.choice([1, 1, 1, 3, 2, 0, 127]), msgpack.packb(fields, use_bin_type=True))
    except Exception:
        return msgpack.ExtType(1, b"")


def _change_ext(ext: msgpack.ExtType, rng) -> msgpack.ExtType:
    try:
        shape, dtype, buffer = msgpack.unpackb(ext.data, raw=False)
    except Exception:
        return _lying_array(rng)
    choice = rng.randrange(4)
    if choice == 0:
        shape = [rng.choice(INTS) for _ in shape] or [rng.choice(INTS)]
    elif choice == 1:
        dtype = rng.choice(DTYPES)
    elif choice == 2:
        buffer = buffer[: rng.randrange(0, len(buffer) + 1)] + bytes(rng.randrange(0, 9))
    else:
        shape = list(shape) + [rng.randrange(0, 3)]
    try:
        return msgpack.ExtType(ext.code, msgpack.packb([shape, dtype, buffer], use_bin_type=True))
    except Exception:
        return _lying_array(rng)


def mutate_tree(tree, rng):
    """One change to a decoded flax msgpack tree (in place where it can);
    returns the tree."""
    nodes = _nodes(tree, [])
    parent, key, node = rng.choice(nodes)
    choice = rng.randrange(6)
    if choice == 0 and isinstance(node, msgpack.ExtType):
        new = _change_ext(node, rng)
    elif choice == 1:
        new = _lying_array(rng)
    elif choice == 2:
        new = _value(rng) if rng.random() < 0.7 else rng.choice(ODD)
    elif choice == 3:  # deep nesting
        new = node
        for _ in range(rng.choice([10, 127, 129, 200, 2000])):
            new = [new] if rng.random() < 0.5 else {"a": new}
    elif choice == 4:  # a chunked array, right or wrong
        chunk = (
            _lying_array(rng) if rng.random() < 0.5 else msgpack.ExtType(1, msgpack.packb([[2], "float64", bytes(16)]))
        )
        new = {
            "__msgpack_chunked_array__": rng.choice([True, 1, None]),
            "shape": {"0": rng.choice([2, 4, 0, -1, 2**40])},
            "chunks": {str(i): chunk for i in range(rng.randrange(0, 3))},
        }
    else:  # drop or rename a key
        if isinstance(parent, dict):
            del parent[key]
            if rng.random() < 0.5:
                parent[rng.choice(["variables", "sampler_state", "σ", "rng", "n_samples", 7, ""])] = node
        return tree
    if parent is None:
        return new
    parent[key] = new
    return tree


def _pack(tree) -> bytes | None:
    try:
        return msgpack.packb(tree, use_bin_type=True)
    except Exception:
        return None


def lie_in_msgpack_lengths(data: bytes, rng) -> bytes:
    """A str/bin/ext/array/map length in the raw bytes set to an edge value."""
    out = bytearray(data)
    markers = [i for i, b in enumerate(out) if b in (0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xDC, 0xDD, 0xDE, 0xDF)]
    if not markers:
        return bytes(out)
    at = rng.choice(markers)
    width = {0xC4: 1, 0xC7: 1, 0xC5: 2, 0xC8: 2, 0xDC: 2, 0xDE: 2}.get(out[at], 4)
    value = rng.choice([0, 1, 2 ** (8 * width) - 1, 2 ** (8 * width - 1), rng.randrange(2 ** (8 * width))])
    out[at + 1 : at + 1 + width] = value.to_bytes(width, "big")
    return bytes(out)


def mutate_msgpack(data: bytes, rng) -> bytes | None:
    if rng.random() < 0.25:
        return lie_in_msgpack_lengths(data, rng)
    tree = _decode(data)
    if tree is None:
        return None
    return _pack(mutate_tree(tree, rng))


# --------------------------------------------------------------------------- zip


def _members(data: bytes):
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return [(info, z.read(info)) for info in z.infolist()]
    except Exception:
        return None


def _write(members, zip64=False) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, content, method in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = method
            with z.open(info, "w", force_zip64=zip64) as f:
                f.write(content)
    return out.getvalue()


def rewrite_state_member(members, rng):
    out = []
    for info, content in members:
        if info.filename == STATE or (info.filename.endswith(".msgpack") and rng.random() < 0.5):
            content = mutate_msgpack(content, rng) or content
        elif info.filename == "metadata.json" and rng.random() < 0.2:
            content = rng.choice([b"{", b"[]", b'{"format": "NetKet"}', b"[" * 5000, b'{"format": 1}'])
        out.append((info.filename, content, info.compress_type))
    return _write(out, zip64=rng.random() < 0.2)


def rename_members(members, rng):
    names = ["../x", "/etc/passwd", STATE, "assets/state.msgpack", "metadata.json", "", "a/../../b"]
    out = [(info.filename, content, info.compress_type) for info, content in members]
    i = rng.randrange(len(out))
    out[i] = (rng.choice(names), out[i][1], out[i][2])
    if rng.random() < 0.3:  # the same name twice
        out.append(out[i])
    return _write(out)


def small_deflate_bomb(members, rng):
    """The state member: a msgpack prefix declaring a large array, then
    zeros that deflate 1000:1 (a few MB inflated from a few KiB)."""
    n = rng.choice([1 << 20, 16 << 20, 64 << 20])
    declared = rng.choice([n, n * 2, 2**32 - 1])
    array = (
        b"\x93\x91" + msgpack.packb(declared) + msgpack.packb("uint8") + b"\xc6" + struct.pack(">I", declared % 2**32)
    )
    prefix = (
        b"\x81\xa9variables\x81\xa6params\x81\xa1a\xc9" + struct.pack(">I", (len(array) + declared) % 2**32) + b"\x01"
    )
    content = prefix + array + bytes(n)
    out = [(info.filename, content if info.filename == STATE else c, zipfile.ZIP_DEFLATED) for info, c in members]
    return _write(out)


def lie_in_the_directory(data: bytes, rng) -> bytes:
    """A size, offset or count in a central-directory entry, a local header
    or the end record set to an edge value (CRC and all else kept)."""
    out = bytearray(data)
    fields = {_CENTRAL: (16, 20, 24, 28, 30, 32, 42), _LOCAL: (14, 18, 22, 26, 28), _END: (8, 10, 12, 16, 20)}
    signature = rng.choice(list(fields))
    places = []
    at = -1
    while (at := out.find(signature, at + 1)) >= 0:
        places.append(at)
    if not places:
        return bytes(out)
    at, offset = rng.choice(places), rng.choice(fields[signature])
    width = (
        2
        if (signature, offset)
        in {
            (_CENTRAL, 28),
            (_CENTRAL, 30),
            (_CENTRAL, 32),
            (_LOCAL, 26),
            (_LOCAL, 28),
            (_END, 8),
            (_END, 10),
            (_END, 20),
        }
        else 4
    )
    if at + offset + width > len(out):
        return bytes(out)
    value = rng.choice([0, 1, 2 ** (8 * width) - 1, 2 ** (8 * width) - 2, rng.randrange(2 ** (8 * width))])
    out[at + offset : at + offset + width] = value.to_bytes(width, "little")
    return bytes(out)


def overlapping_members(data: bytes, rng) -> bytes:
    """A second central-directory entry over the bytes of an existing
    member, under another name (the end record counts it)."""
    end = data.rfind(_END)
    if end < 0 or end + 22 > len(data):
        return data
    count = struct.unpack_from("<H", data, end + 10)[0]
    size, start = struct.unpack_from("<II", data, end + 12)
    entries, at = [], start
    while at + 46 <= start + size and data[at : at + 4] == _CENTRAL:
        n, m, k = struct.unpack_from("<HHH", data, at + 28)
        entries.append(data[at : at + 46 + n + m + k])
        at += 46 + n + m + k
    if not entries:
        return data
    entry = bytearray(rng.choice(entries))
    name_length = struct.unpack_from("<H", entry, 28)[0]
    new_name = rng.choice([STATE, "metadata.json", "object.json", "x"]).encode()
    entry[46 : 46 + name_length] = new_name
    struct.pack_into("<H", entry, 28, len(new_name))
    directory = data[start : start + size] + bytes(entry)
    record = bytearray(data[end : end + 22])
    struct.pack_into("<HHII", record, 8, count + 1, count + 1, len(directory), start)
    return data[:start] + directory + bytes(record) + data[end + 22 :]


def mutate(data: bytes, rng: random.Random) -> bytes | None:
    # the input is often damaged already: a mutation that cannot apply to it
    # gives None (byte mutations then), never an error of the mutator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile's "Duplicate name", on purpose
        try:
            return _mutate(data, rng)
        except Exception:
            return None


def _mutate(data: bytes, rng: random.Random) -> bytes | None:
    if data[:4] == _LOCAL:
        members = _members(data)
        choice = rng.randrange(6)
        if choice == 0:
            return lie_in_the_directory(data, rng)
        if choice == 1:
            return overlapping_members(data, rng)
        if not members:
            return lie_in_the_directory(data, rng)
        if choice == 2:
            return rename_members(members, rng)
        if choice == 3 and rng.random() < 0.3:
            return small_deflate_bomb(members, rng)
        return rewrite_state_member(members, rng)
    if data[:1] and (0x80 <= data[0] <= 0x8F or data[0] in (0xDE, 0xDF)):
        return mutate_msgpack(data, rng)
    return None
