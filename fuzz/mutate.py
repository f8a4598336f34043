"""Structure-aware mutations of nkserde files, beside atheris's byte
mutations.

A byte flip almost always dies at a checksum. These mutations parse the
file (trailer -> header -> index), change one thing a damaged or hostile
writer could change, and write the file back with every checksum
recomputed (header, and the array whose bytes changed), so the reader's
checks behind the checksums are what gets exercised: lying lengths,
offsets past the end, negative and huge shapes, overlapping blocks, dtype
strings that are not dtypes, codecs that do not exist, zstd frames whose
declared content size lies, tree markers and type names that are wrong.

``mutate(data, rng)`` returns new file bytes, or None if ``data`` is not a
file whose header parses (the caller then falls back to byte mutations).
No dependency on atheris: tests/test_fuzz_regressions.py uses it too.
"""

from __future__ import annotations

import random
import struct

import msgpack
import xxhash

PREAMBLE = struct.Struct("<8sII")
TRAILER = struct.Struct("<QQQ8s")
END_MAGIC = b"NKSERDE\x00"
MAGIC = b"\x89NKSERD\n"

# values that sit on the edges of what a reader checks
INTS = [
    0,
    1,
    -1,
    2,
    7,
    63,
    64,
    65,
    255,
    4096,
    2**31 - 1,
    2**31,
    2**32,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    10**6,
    10**12,
]
ODD = [None, True, 1.5, float("nan"), "", "x", b"\x00", [], {}, [1, 2], {"a": 1}]
DTYPES = [
    "float64",
    "int8",
    "complex128",
    "bool",
    "bfloat16",
    "int4",
    "<U1",
    "object",
    "O",
    "float128",
    "V8",
    "datetime64[s]",
    "|S4",
    ">f8",
    "float64\x00",
    "int",
    "np.float64",
    "__import__('os')",
]
CODECS = ["raw", "zstd", "gzip", "", "ZSTD", "lz4", None]
MARKERS = ["@array", "@stacked", "@per_process", "@int", "@complex", "@type", "@version", "@primary"]


def checksum(data) -> int:
    return xxhash.xxh3_64_intdigest(data)


def split(data: bytes):
    """(header dict, header offset, version) or None."""
    if len(data) < PREAMBLE.size + TRAILER.size:
        return None
    offset, length, _digest, end = TRAILER.unpack(data[-TRAILER.size :])
    if end != END_MAGIC or offset + length + TRAILER.size != len(data):
        return None
    try:
        header = msgpack.unpackb(data[offset : offset + length], raw=False, strict_map_key=False)
    except Exception:
        return None
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
        return None
    return header, offset


def join(payload: bytes, header) -> bytes:
    """``payload`` (preamble + arrays) with ``header`` and a trailer whose
    checksum is right."""
    raw = msgpack.packb(header, use_bin_type=True)
    return payload + raw + TRAILER.pack(len(payload), len(raw), checksum(raw), END_MAGIC)


def _storages(header):
    """Every storage entry (single-block arrays and blocks), with its array."""
    for entry in header["arrays"]:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("blocks"), list):
            for block in entry["blocks"]:
                if isinstance(block, dict):
                    yield entry, block
        else:
            yield entry, entry


def _pick_storage(header, rng, codec=None):
    found = [(e, s) for e, s in _storages(header) if codec is None or s.get("codec") == codec]
    return rng.choice(found) if found else (None, None)


def _value(rng):
    r = rng.random()
    if r < 0.6:
        return rng.choice(INTS)
    if r < 0.8:
        return rng.choice(ODD)
    return rng.randrange(-(2**64), 2**64)


# --------------------------------------------------------------------------- mutations of the index


def lie_about_a_field(header, payload, rng):
    _, s = _pick_storage(header, rng)
    if s is None:
        return None
    s[rng.choice(sorted(s))] = _value(rng)
    return payload


def offset_past_the_end(header, payload, rng):
    _, s = _pick_storage(header, rng)
    if s is None:
        return None
    s["offset"] = rng.choice([len(payload), len(payload) + 64, len(payload) - 64, 2**63, 2**64 - 64])
    return payload


def lying_length(header, payload, rng):
    _, s = _pick_storage(header, rng)
    if s is None:
        return None
    key = rng.choice(["stored", "nbytes"]) if "nbytes" in s else "stored"
    s[key] = max(0, s.get(key, 0) + rng.choice([-1, 1, 64, -64, 2**20, 2**40]))
    return payload


def weird_shape(header, payload, rng):
    entry = rng.choice(header["arrays"]) if header["arrays"] else None
    if not isinstance(entry, dict):
        return None
    shape = rng.choice(
        [[-1], [2**62, 2**62], [10**6, 10**6], [0], [], [1] * 64, [2**64 - 1], [3, -3], "abc", None, [1.5]]
    )
    entry["shape"] = shape
    if rng.random() < 0.5 and "nbytes" in entry and isinstance(shape, list) and all(isinstance(d, int) for d in shape):
        n = 8
        for d in shape:
            n *= d
        entry["nbytes"] = n  # a consistent lie
    return payload


def bogus_dtype(header, payload, rng):
    entry = rng.choice(header["arrays"]) if header["arrays"] else None
    if not isinstance(entry, dict):
        return None
    entry["dtype"] = rng.choice(DTYPES)
    return payload


def bogus_codec(header, payload, rng):
    _, s = _pick_storage(header, rng)
    if s is None:
        return None
    s["codec"] = rng.choice(CODECS)
    return payload


def to_blocks(header, payload, rng):
    """A raw single-block array rewritten as two blocks (as several
    processes write it), each stored at its own aligned offset with a right
    checksum, then, most of the time, a lie: overlapping, gapped, outside
    the array, duplicated, or many empty blocks. The file becomes format 2."""
    candidates = [
        e
        for e in header["arrays"]
        if isinstance(e, dict)
        and e.get("codec") == "raw"
        and isinstance(e.get("shape"), list)
        and e["shape"]
        and all(isinstance(d, int) and d > 0 for d in e["shape"])
        and isinstance(e.get("offset"), int)
        and isinstance(e.get("nbytes"), int)
    ]
    if not candidates:
        return None
    entry = rng.choice(candidates)
    i = header["arrays"].index(entry)
    shape, rows = entry["shape"], entry["shape"][0]
    row_bytes = entry["nbytes"] // rows
    data = payload[entry["offset"] : entry["offset"] + entry["nbytes"]]
    cut = rng.randint(0, rows)
    blocks = []
    for a, b in ((0, cut), (cut, rows)):
        chunk = data[a * row_bytes : b * row_bytes]
        payload += bytes(-len(payload) % 64)
        blocks.append(
            {
                "start": [a] + [0] * (len(shape) - 1),
                "shape": [b - a] + shape[1:],
                "offset": len(payload),
                "stored": len(chunk),
                "codec": "raw",
                "checksum": checksum(chunk),
            }
        )
        payload += chunk
    lie = rng.choice(["none", "overlap", "gap", "outside", "duplicate", "empties"])
    if lie == "overlap" and blocks[1]["start"][0] > 0:
        blocks[1]["start"][0] -= 1
    elif lie == "gap":
        blocks[1]["start"][0] += 1
    elif lie == "outside":
        blocks[1]["start"][0] = rng.choice([2**40, rows, 2**63])
    elif lie == "duplicate":
        blocks.append(dict(blocks[0]))
    elif lie == "empties":
        empty = {**blocks[0], "shape": [0] + shape[1:], "stored": 0, "checksum": checksum(b"")}
        blocks += [dict(empty, start=[rng.randrange(rows)] + [0] * (len(shape) - 1)) for _ in range(50)]
    header["arrays"][i] = {"dtype": entry.get("dtype"), "shape": shape, "blocks": blocks}
    header["format_version"] = 2
    return PREAMBLE.pack(MAGIC, 2, 0) + payload[PREAMBLE.size :]


def zstd_size_lies(header, payload, rng):
    """Rewrites a zstd frame so that its header declares another content
    size (or none), with the array's checksum recomputed."""
    _, s = _pick_storage(header, rng, "zstd")
    if s is None or not all(isinstance(s.get(k), int) for k in ("offset", "stored")):
        return None
    import zstandard

    start, stored = s["offset"], s["stored"]
    frame = payload[start : start + stored]
    try:
        content = zstandard.ZstdDecompressor().decompress(frame)
    except Exception:
        return None
    lie = rng.choice([len(content) + 1, len(content) * 2, max(0, len(content) - 1), 0, 2**40, None])
    if lie is None:
        new = zstandard.ZstdCompressor(level=1, write_content_size=False).compress(content * rng.choice([1, 2, 64]))
    else:
        # a frame that really holds lie bytes (bounded), or one that claims it
        real = content * 2 if lie == len(content) * 2 else content
        new = bytearray(zstandard.ZstdCompressor(level=1).compress(real))
        fhd = new[4]
        fcs_size = [0 if not fhd & 0x20 else 1, 2, 4, 8][fhd >> 6]
        window = 0 if fhd & 0x20 else 1
        dict_id = [0, 1, 2, 4][fhd & 3]
        at = 5 + window + dict_id
        if fcs_size == 8 or lie < 2**32:
            if fcs_size == 1:
                fmt, value = "<B", min(lie, 255)
            elif fcs_size == 2:
                fmt, value = "<H", max(0, min(lie, 65535 + 256) - 256)
            elif fcs_size == 4:
                fmt, value = "<I", min(lie, 2**32 - 1)
            elif fcs_size == 8:
                fmt, value = "<Q", lie
            else:
                return None
            struct.pack_into(fmt, new, at, value)
        new = bytes(new)
    payload = (
        payload[:start] + new + payload[start + stored :]
        if len(new) <= stored
        else (payload + bytes(-len(payload) % 64) + new)
    )
    if len(new) > stored:
        s["offset"] = len(payload) - len(new)
    s["stored"], s["checksum"] = len(new), checksum(new)
    return payload


def damaged_payload(header, payload, rng):
    """Bytes of an array changed, its checksum recomputed: the decoder, not
    the checksum, must catch what follows (a raw array decodes to other
    numbers; a zstd frame may be garbage)."""
    _, s = _pick_storage(header, rng)
    if s is None or not all(isinstance(s.get(k), int) for k in ("offset", "stored")) or not s["stored"]:
        return None
    start, stored = s["offset"], s["stored"]
    if start + stored > len(payload):
        return None
    chunk = bytearray(payload[start : start + stored])
    for _ in range(rng.randint(1, 4)):
        chunk[rng.randrange(len(chunk))] = rng.randrange(256)
    s["checksum"] = checksum(bytes(chunk))
    return payload[:start] + bytes(chunk) + payload[start + stored :]


# --------------------------------------------------------------------------- the tree and the rest


def _nodes(tree, out, depth=0):
    if depth > 60:
        return out
    if isinstance(tree, dict):
        out.append(tree)
        for v in tree.values():
            _nodes(v, out, depth + 1)
    elif isinstance(tree, list):
        out.append(tree)
        for v in tree:
            _nodes(v, out, depth + 1)
    return out


def mangle_tree(header, payload, rng):
    """A node of the tree replaced: markers with wrong payloads, another
    type name or schema version (migrations run on load), deep nesting."""
    nodes = _nodes(header.get("tree"), [])
    if not nodes:
        return None
    node = rng.choice(nodes)
    choice = rng.random()
    if isinstance(node, dict) and node:
        key = rng.choice(list(node))
        if choice < 0.25 and "@version" in node:
            node["@version"] = rng.choice([0, 1, 2, 3, 99, -1, "1", None])
        elif choice < 0.4 and "@type" in node:
            node["@type"] = rng.choice(
                ["netket.vqs.MCState", "jax.random.key", "os.system", "", "builtins.eval", node["@type"] + "x"]
            )
        elif choice < 0.7:
            marker = rng.choice(MARKERS)
            node[key] = {
                marker: _value(rng)
                if rng.random() < 0.6
                else rng.choice(
                    [[{"@stacked": 0}], [[]], "123" * 2000, ["1.0", 2], [1.0, 2.0], 0, len(header["arrays"])]
                )
            }
        elif choice < 0.85:
            deep = None
            for _ in range(rng.choice([100, 400, 500])):
                deep = [deep]
            node[key] = deep
        else:
            del node[key]
    elif isinstance(node, list) and node:
        j = rng.randrange(len(node))
        node[j] = rng.choice(
            [{"@array": rng.choice([0, -1, 1, 10**9])}, {"@per_process": []}, {"@stacked": 0}, _value(rng)]
        )
    else:
        return None
    return payload


def change_meta_or_version(header, payload, rng):
    r = rng.random()
    if r < 0.3:
        header["format_version"] = rng.choice([0, 1, 2, 3, -1, "2", None])
    elif r < 0.6:
        header["meta"] = rng.choice([None, [], {}, {"process_count": 2**70}, header.get("meta")])
    else:
        key = rng.choice(["format_version", "meta", "tree", "arrays"])
        header.pop(key, None)
        if rng.random() < 0.5:
            header[key] = _value(rng)
    return payload


MUTATIONS = [
    lie_about_a_field,
    offset_past_the_end,
    lying_length,
    weird_shape,
    bogus_dtype,
    bogus_codec,
    to_blocks,
    zstd_size_lies,
    damaged_payload,
    mangle_tree,
    change_meta_or_version,
]


def mutate(data: bytes, rng: random.Random) -> bytes | None:
    """One structure-aware mutation of nkserde file ``data`` (see the module
    doc; a history log's are mutate_history.py's, and fuzz/mutators.py
    chooses); None if ``data`` does not parse or the mutation does not
    apply."""
    parsed = split(data)
    if parsed is None:
        return None
    header, offset = parsed
    payload = data[:offset]
    mutation = rng.choice(MUTATIONS)
    try:
        payload = mutation(header, payload, rng)
        if payload is None:
            return None
        if rng.random() < 0.1:  # another preamble version
            payload = PREAMBLE.pack(MAGIC, rng.choice([0, 1, 2, 3, 2**32 - 1]), 0) + payload[PREAMBLE.size :]
        return join(payload, header)
    except (ValueError, TypeError, OverflowError, RecursionError, struct.error):
        return None  # e.g. msgpack cannot pack an int beyond 64 bits
