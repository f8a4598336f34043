"""What a file says of itself, from its header (and, to verify it, its
checksums), without NetKet, JAX or the registry: what ``nkserde inspect``,
``verify`` and ``ls`` need, so the command line answers without importing
them. ``nkserde.info`` / ``verify`` are these functions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import format as fileformat
from ..types import nested
from ..errors import format_path
from ..format import foreign, limits
from ..format.tree_codec import TYPE, VERSION, outline as tree_codec_outline


def migrated_path(src) -> Path:
    """Where ``nkserde.migrate`` and ``nkserde migrate`` write a migrated
    copy of ``src`` by default: ``<stem>.migrated<suffix>`` beside it."""
    src = Path(src)
    return src.with_name(f"{src.stem}.migrated{src.suffix}")


def info(path) -> dict:
    """The file's metadata without reading the arrays: format_version,
    nkserde/netket/jax/flax/numpy/python versions, created, process_count,
    root_type and ``types`` ({type name: schema version})."""
    return header_info(fileformat.read_header(Path(path)))


def header_info(header) -> dict:
    """What :func:`info` returns, from a header already read."""
    return {
        "format_version": header["format_version"],
        **header["meta"],
        "n_arrays": len(header["arrays"]),
        "payload_bytes": _payload_bytes(header["arrays"]),
    }


def _payload_bytes(entries) -> int:
    # info() does not validate the index as a load does: tolerate anything
    total = 0
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        blocks = entry.get("blocks") if isinstance(entry.get("blocks"), list) else [entry]
        total += sum(b["stored"] for b in blocks if isinstance(b, dict) and isinstance(b.get("stored"), int))
    return total


def verify_steps(path):
    """:func:`verify` as a generator of bounded steps (see
    :func:`save_state_dict_steps`); returns what :func:`verify` returns."""
    return header_info((yield from fileformat.verify_steps(Path(path))))


def verify(path) -> dict:
    """Reads the whole file and checks the header and every array checksum,
    without a template. Returns what :func:`info` returns; raises
    CorruptFileError (or UnsupportedVersionError) otherwise. Streams the
    arrays through one buffer: memory does not grow with the file."""
    return fileformat.drain(verify_steps(path))


def contents(path) -> tuple[dict, list[dict]]:
    """What a file holds, from its header alone (no array is read):
    ``(info, entries)`` with ``info`` as :func:`info` returns it and one
    entry per place in the stored tree, in tree order:

    * ``{"kind": "object", "path", "type", "schema_version", "per_process"}``
      for every stored object (``"@type"`` as stored: an old file may name
      an old alias);
    * ``{"kind": "array", "path", "dtype", "shape", "nbytes",
      "stored_bytes", "codec", "blocks", "type", "schema_version",
      "per_process", "index"}``: ``stored_bytes`` on disk, ``codec``
      ``"raw"``, ``"zstd"`` or ``"raw+zstd"`` (blocks stored differently),
      ``type``/``schema_version`` of the innermost object holding it,
      ``index`` in the file's array table;
    * ``{"kind": "value", "path", "value", "type", "schema_version",
      "per_process"}``: a scalar, string, ``None``, empty map or list of
      scalars kept in the header (JSON-safe: non-finite floats and complex
      numbers as strings, bytes as ``"<n bytes>"``).

    Paths are ``/``-joined (``driver/state/parameters/Dense/kernel``); a
    per-process value (one per JAX process of the run that wrote it) is
    listed once, with process 0's values and its arrays stacked ``[P, ...]``.
    """
    path = Path(path)
    header, table = fileformat.read_index(path)
    entries, objects = [], []  # objects: enclosing (path, type, version), innermost last
    try:
        for kind, where, payload, per_process in tree_codec_outline(header["tree"]):
            while objects and objects[-1][0] != where[: len(objects[-1][0])]:
                objects.pop()
            if where and where[-1] in (TYPE, VERSION) and objects and objects[-1][0] == where[:-1]:
                continue
            name = format_path(where)
            if kind == "map":
                if isinstance(payload.get(TYPE), str):
                    objects.append((where, payload[TYPE], payload.get(VERSION)))
                    entries.append(
                        {
                            "kind": "object",
                            "path": name,
                            "type": payload[TYPE],
                            "schema_version": payload.get(VERSION),
                            "per_process": per_process,
                        }
                    )
                continue
            owner = {
                "type": objects[-1][1] if objects else None,
                "schema_version": objects[-1][2] if objects else None,
                "per_process": per_process,
            }
            if kind == "array":
                if payload >= len(table):
                    raise ValueError(f"array reference {payload} out of range")
                a = table[payload]
                entries.append(
                    {
                        "kind": "array",
                        "path": name,
                        "dtype": a["dtype"],
                        "shape": a["shape"],
                        "nbytes": a["nbytes"],
                        "stored_bytes": a["stored"],
                        "codec": "+".join(a["codecs"]),
                        "blocks": a["blocks"],
                        **owner,
                        "index": payload,
                    }
                )
            else:
                entries.append({"kind": "value", "path": name, "value": jsonable(payload), **owner})
    except (ValueError, RecursionError) as exc:
        raise fileformat.malformed_tree(path, exc) from None
    return header_info(header), entries


def jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def netket_contents(path) -> tuple[dict, list[dict], list]:
    """What a file NetKet wrote holds (a flax ``.mpack``, an nqxpack file or
    directory), read whole within the load limits, without NetKet:
    ``(info, entries, arrays)`` with ``info`` ``{"kind": "mpack" |
    "nqxpack", "holds"}``, entries as :func:`contents` gives them (arrays
    with ``path``, ``dtype``, ``shape``, ``nbytes``, ``index``; values with
    ``path``, ``value``) in the file's order, and ``arrays[index]`` the
    arrays. Raises CorruptFileError (or LoadLimitError) if it does not
    decode."""
    path = Path(path)
    kind = foreign.netket_kind(path)
    state = foreign.read_netket_state(path, limits.current().max_load_bytes)
    entries, arrays = [], []

    for where, node in nested.leaves(state, _netket_entries):
        if isinstance(node, np.ndarray):
            arrays.append(node)
            entries.append(
                {
                    "kind": "array",
                    "path": format_path(where),
                    "dtype": node.dtype.name,
                    "shape": list(node.shape),
                    "nbytes": int(node.nbytes),
                    "index": len(arrays) - 1,
                }
            )
        else:
            value = node.item() if isinstance(node, np.generic) else node
            entries.append({"kind": "value", "path": format_path(where), "value": jsonable(value)})
    return {"kind": kind, "holds": foreign.holds(state)}, entries, arrays


def _netket_entries(node):
    # a list of scalars (a shape, a list of names) is one value
    if isinstance(node, list) and not any(isinstance(v, (dict, list, np.ndarray)) for v in node):
        return ()
    return nested.entries(node)
