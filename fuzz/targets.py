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
``read_arrays``). And the way a resume reads a checkpoint's logger
histories (:func:`read_history_log`, :func:`resolve_histories`): a
checkpoint file is resolved against
the seed corpus's history log, a history log (nkserde/format/history_log.py)
is read record by record, its records replayed, and the seed corpus's
layout-2 checkpoint resolved against it.

:func:`read_netket_file` does the same for NetKet's own files (flax
``.mpack``, nqxpack ``.nk`` zips and their directory form): ``load`` into
an MCState, a FullSumState and a parameters dict like the ones NetKet's
files in the seed corpus hold.
"""

from __future__ import annotations

import shutil
import warnings
import zipfile
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
        ("history log", lambda: read_history_log(path, data, scratch)),
        ("resolve histories", lambda: resolve_histories(path, data, scratch)),
    )
    return first_crash(actions)


# The seed corpus's layout-2 checkpoint and the history log it refers to
# (both written by one Checkpoint run): the fixed half of each pair.
SEED_CHECKPOINT = Path(__file__).resolve().parent / "corpus" / "checkpoint_layout2_step4.nks"
SEED_HISTORY_LOG = Path(__file__).resolve().parent / "corpus" / "history_log.nkh"
SEED_HISTORY_NAME = "history-000001.nkh"  # its name beside the checkpoint


def _histories_scratch(scratch: Path) -> Path:
    where = scratch / "histories"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    return where


def read_history_log(path: Path, data: bytes, scratch: Path) -> None:
    """A history log (by its magic): its header, every record to its end,
    the records replayed as a resume does."""
    from nkserde.checkpoint.persist import logger_histories as histories
    from nkserde.format import history_log

    if not data.startswith(history_log.MAGIC):
        return
    header = history_log.read_header(path)
    trees, _ = history_log.read_records(path, file_id=header["id"], end=None, records=None, chain_start=0)
    histories._replay([(f"record {i}", t) for i, t in enumerate(trees)])


def resolve_histories(path: Path, data: bytes, scratch: Path) -> None:
    """What a resume reads of logger histories: a history log (by its magic)
    under the seed checkpoint, which is resolved against it and verified;
    any other input resolved as a checkpoint beside the seed history log."""
    from nkserde.checkpoint_files import directory
    from nkserde.checkpoint.persist import logger_histories as histories
    from nkserde.format import history_log

    where = _histories_scratch(scratch)
    if data.startswith(history_log.MAGIC):
        (where / SEED_HISTORY_NAME).write_bytes(data)
        checkpoint = where / SEED_CHECKPOINT.name
        shutil.copy(SEED_CHECKPOINT, checkpoint)
        directory.problem(checkpoint)
    else:
        shutil.copy(SEED_HISTORY_LOG, where / SEED_HISTORY_NAME)
        checkpoint = where / "step-0000000004.nks"
        checkpoint.write_bytes(data)
    histories.resolve(checkpoint, nkserde.load_state_dict(checkpoint))


def first_crash(actions):
    """Runs every ``(name, action)``; the first ``(name, exception)`` that
    is not an NkserdeError or FileNotFoundError, or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, action in actions:
            try:
                action()
            except (NkserdeError, FileNotFoundError):
                pass
            except Exception as exc:
                return name, exc
    return None


def netket_templates() -> list:
    """Templates like the states of tests/fixtures/netket-files-*/ (what
    ``generate.py netket-files`` writes), so that a mutated file gets as
    far into a load as a real one."""
    import netket as nk

    hilbert = nk.hilbert.Spin(0.5, N=8)
    model = nk.models.RBM(alpha=1, param_dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mc = nk.vqs.MCState(
            nk.sampler.MetropolisLocal(hilbert, n_chains=8), model, n_samples=64, seed=0, sampler_seed=1
        )
        full = nk.vqs.FullSumState(hilbert, model, seed=0)
    return [mc, full, mc.parameters]


def read_netket_file(path: Path, templates: list, scratch: Path):
    """Loads the NetKet file at ``path`` into every template, and a zip's
    members laid out as a directory (nqxpack's directory form) into the
    first; returns None or ``(action, exception)`` as :func:`read_every_way`."""
    actions = [(f"load into {type(t).__name__}", lambda t=t: nkserde.load(t, path)) for t in templates]
    directory = scratch / "as-directory.nk"
    if _unzip(path, directory):
        actions.append(("load of the directory form", lambda: nkserde.load(templates[0], directory)))
    return first_crash(actions)


def _unzip(path: Path, directory: Path, limit: int = 1 << 20) -> bool:
    """The zip's small members as files under ``directory`` (names that
    would leave it are skipped); False if ``path`` is not a readable zip."""
    shutil.rmtree(directory, ignore_errors=True)
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist()[:16]:
                parts = [p for p in info.filename.split("/") if p]
                if not parts or ".." in parts or info.file_size > limit:
                    continue
                target = directory.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(info))
    except Exception:
        return False
    return directory.is_dir()
