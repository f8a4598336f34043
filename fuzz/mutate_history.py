"""Structure-aware mutations of history logs (nkserde/format/history_log.py:
the files a Checkpoint appends its loggers' rows to), beside atheris's byte
mutations.

The log is parsed (preamble -> header -> records), one thing a damaged or
hostile writer could change is changed, and every checksum is recomputed
(the header's, and the record's head and data), so that what lies behind
the checksums is exercised: lying head and data lengths, records that run
past the end or stop short, array entries whose dtype, shape, offset or
size lie, record trees with wrong values (a series' start row, columns of
different lengths, a reset that is not a bool, markers), headers naming
odd parents, records dropped, repeated or cut in half.

``mutate(data, rng)`` returns new log bytes, or None if ``data`` is not a
history log whose records parse (the caller falls back to byte mutations).
No dependency on atheris: tests/test_fuzz_regressions.py uses it too.
"""

from __future__ import annotations

import random
import struct

import msgpack

import mutate as nks

MAGIC = b"\x89NKSHIS\n"
PREAMBLE = struct.Struct("<8sIIQQ")
RECORD = struct.Struct("<4sIQQQQ")


def split(data: bytes):
    """(header, [[record header fields, head, data]]) or None."""
    if not data.startswith(MAGIC) or len(data) < PREAMBLE.size:
        return None
    _magic, _version, _flags, length, _digest = PREAMBLE.unpack(data[: PREAMBLE.size])
    offset = PREAMBLE.size + length
    try:
        header = msgpack.unpackb(data[PREAMBLE.size : offset], raw=False, strict_map_key=False)
    except Exception:
        return None
    records = []
    while offset + RECORD.size <= len(data):
        fields = list(RECORD.unpack(data[offset : offset + RECORD.size]))
        head_length, data_length = fields[2], fields[3]
        start = offset + RECORD.size
        if start + head_length + data_length > len(data):
            return None
        head = data[start : start + head_length]
        try:
            head = msgpack.unpackb(head, raw=False, strict_map_key=False)
        except Exception:
            return None
        records.append([fields, head, data[start + head_length : start + head_length + data_length]])
        offset = start + head_length + data_length
    return (header, records) if offset == len(data) else None


def join(header, records, *, version=1, keep_lengths=False) -> bytes:
    raw = msgpack.packb(header, use_bin_type=True)
    out = [PREAMBLE.pack(MAGIC, version, 0, len(raw), nks.checksum(raw)), raw]
    for fields, head, data in records:
        head = msgpack.packb(head, use_bin_type=True)
        magic, flags, head_length, data_length = fields[:4]
        if not keep_lengths:
            head_length, data_length = len(head), len(data)
        out.append(RECORD.pack(magic, flags, head_length, data_length, nks.checksum(head), nks.checksum(data)))
        out += [head, data]
    return b"".join(out)


def _record(records, rng):
    return rng.choice(records) if records else None


def lying_lengths(header, records, rng):
    record = _record(records, rng)
    if record is None:
        return None
    k = rng.choice([2, 3])
    record[0][k] = max(0, min(2**64 - 1, record[0][k] + rng.choice([-1, 1, 40, -40, 2**20, 2**40, 2**63])))
    return "keep_lengths"


def record_magic_or_flags(header, records, rng):
    record = _record(records, rng)
    if record is None:
        return None
    if rng.random() < 0.5:
        record[0][0] = rng.choice([b"NKHS", b"\x00\x00\x00\x00", b"NKSE"])
    else:
        record[0][1] = rng.choice([1, 2**31, 2**32 - 1])
    return True


def lying_array_entry(header, records, rng):
    record = _record(records, rng)
    if record is None or not isinstance(record[1], dict) or not record[1].get("arrays"):
        return None
    entry = rng.choice(record[1]["arrays"])
    if not isinstance(entry, dict):
        return None
    key = rng.choice(["dtype", "shape", "offset", "nbytes"])
    if key == "dtype":
        entry[key] = rng.choice(nks.DTYPES)
    elif key == "shape":
        entry[key] = rng.choice([[-1], [2**62, 2**62], [0, 2**62, 2**62], [], [1] * 40, "abc", None, [1.5], [3]])
    else:
        entry[key] = nks._value(rng)
    return True


def damaged_data(header, records, rng):
    record = _record(records, rng)
    if record is None or not record[2]:
        return None
    data = bytearray(record[2])
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    record[2] = bytes(data)
    return True


ODD_VALUES = [None, True, -1, 0, 1, 2**40, 1.5, "x", "", [], {}, [1, 2], {"a": 1}, [["x"]], {"@array": 0}]


def mangle_record_tree(header, records, rng):
    """A node of a record's tree replaced: a series' start, its columns or
    path, a logger entry's reset or name, markers."""
    record = _record(records, rng)
    if record is None or not isinstance(record[1], dict):
        return None
    nodes = nks._nodes(record[1].get("tree"), [])
    if not nodes:
        return None
    node = rng.choice(nodes)
    if isinstance(node, dict) and node:
        key = rng.choice(list(node))
        r = rng.random()
        if r < 0.6:
            node[key] = rng.choice(ODD_VALUES) if rng.random() < 0.7 else nks._value(rng)
        elif r < 0.8:
            del node[key]
        else:
            node[rng.choice(["extra", "start", "reset", "@array", "columns"])] = rng.choice(ODD_VALUES)
    elif isinstance(node, list) and node:
        j = rng.randrange(len(node))
        node[j] = rng.choice(ODD_VALUES)
        if rng.random() < 0.3:
            node.append(rng.choice(ODD_VALUES))
    else:
        return None
    return True


def change_header(header, records, rng):
    if not isinstance(header, dict):
        return None
    r = rng.random()
    if r < 0.3:
        header["id"] = rng.choice(["", "0" * 32, "g" * 32, None, 7, header.get("id", "") + "0"])
    elif r < 0.7:
        parent = {"file": "history-000000.nkh", "id": "0" * 32, "end": 100, "records": 1, "chain": 0}
        header["parent"] = rng.choice(
            [
                parent,
                {**parent, "file": "../history-000001.nkh"},
                {**parent, "file": "history-000001.nkh"},
                {**parent, "end": -1},
                {**parent, "records": 2**64},
                {k: v for k, v in parent.items() if k != "chain"},
                [],
                "x",
            ]
        )
    else:
        header.pop(rng.choice(["id", "parent", "created", "nkserde"]), None)
    return True


def drop_repeat_or_swap(header, records, rng):
    if not records:
        return None
    r = rng.random()
    i = rng.randrange(len(records))
    if r < 0.4:
        del records[i]
    elif r < 0.7:
        records.insert(i, [list(records[i][0]), records[i][1], records[i][2]])
    elif len(records) > 1:
        j = rng.randrange(len(records))
        records[i], records[j] = records[j], records[i]
    else:
        return None
    return True


MUTATIONS = [
    lying_lengths,
    record_magic_or_flags,
    lying_array_entry,
    damaged_data,
    mangle_record_tree,
    change_header,
    drop_repeat_or_swap,
]


def mutate(data: bytes, rng: random.Random) -> bytes | None:
    """One structure-aware mutation of the history log ``data``; None if it
    does not parse or the mutation does not apply."""
    parsed = split(data)
    if parsed is None:
        return None
    header, records = parsed
    try:
        applied = rng.choice(MUTATIONS)(header, records, rng)
        if applied is None:
            return None
        version = rng.choice([0, 2, 2**32 - 1]) if rng.random() < 0.05 else 1
        out = join(header, records, version=version, keep_lengths=applied == "keep_lengths")
        if rng.random() < 0.1:  # a torn tail, or a record cut short
            out = out[: rng.randrange(PREAMBLE.size, len(out) + 1)]
        return out
    except (ValueError, TypeError, OverflowError, RecursionError, struct.error):
        return None
