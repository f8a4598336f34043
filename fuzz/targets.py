"""What the fuzzer does with one input, without atheris: shared by
fuzz/fuzz_reader.py and tests/test_fuzz_regressions.py (which replays every
input kept in fuzz/regressions/).

The input is read every way a user reads a file: ``info`` (preamble,
trailer, header), ``verify`` (index, blocks, every checksum, streamed),
``load_state_dict`` (codecs, array decoding, per-process nodes, the tree),
``load`` into a template of the file's root type (registrations, schema
migrations, format-1 files, checkpoint files), and ``migrate`` (an old file
rewritten at today's versions, without a template); and the partial
paths: ``nkserde.open`` (every key read, one at a time, lazily) and the
index and array-at-a-time reads of the command line (``read_index``,
``read_arrays``).
"""

from __future__ import annotations

import warnings
import zlib
from pathlib import Path

import nkserde
from nkserde import format as fileformat
from nkserde.errors import NkserdeError

# a 64 KiB input may legitimately declare up to ~2 GB of zstd-compressed
# zeros; a fuzzed load is bounded well below the fuzzer's RSS limit
MAX_LOAD_BYTES = 256 << 20


def templates() -> dict:
    """One template per scenario of tests/fixtures/scenarios.py (the
    corpus's files come from them), by root type name. Needs tests/fixtures
    on sys.path."""
    import scenarios

    out: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for scenario in scenarios.SCENARIOS.values():
            obj = scenario.build()
            out.setdefault(type(obj).__name__, []).append(obj)
    return out


def _template_for(path: Path, data: bytes, templates: dict):
    try:
        root = nkserde.info(path).get("root_type")
    except NkserdeError:
        root = None
    candidates = templates.get(root) if isinstance(root, str) else None
    candidates = candidates or [t for ts in templates.values() for t in ts]
    return candidates[zlib.crc32(data) % len(candidates)]


def _open_every_key(path: Path) -> None:
    with nkserde.open(path) as opened:
        opened.info
        for key in opened.keys()[:64]:
            opened.read(key)


def read_every_way(path: Path, templates: dict, scratch: Path):
    """Reads the file at ``path`` every way; returns None, or
    ``(action, exception)`` for the first exception that is not an
    NkserdeError or FileNotFoundError (a crash)."""
    data = path.read_bytes()
    actions = (
        ("info", lambda: nkserde.info(path)),
        ("verify", lambda: nkserde.verify(path)),
        ("load_state_dict", lambda: nkserde.load_state_dict(path)),
        ("load", lambda: nkserde.load(_template_for(path, data, templates), path)),
        ("migrate", lambda: nkserde.migrate(path, scratch / "migrated.nks", overwrite=True)),
        ("open", lambda: _open_every_key(path)),
        ("read_index/read_arrays", lambda: (fileformat.read_index(path), list(fileformat.read_arrays(path)))),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, action in actions:
            try:
                action()
            except (NkserdeError, FileNotFoundError):
                pass
            except Exception as exc:  # noqa: BLE001 -- that is the point
                return name, exc
    return None
