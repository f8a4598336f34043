"""Every crash the fuzzer (fuzz/) found, kept: the inputs in
fuzz/regressions/ are replayed the way the fuzzer reads them, and each
crash is also rebuilt here from a real file so that its cause is readable.
A short seeded run of the structure-aware mutator keeps fuzz/mutate.py
working without atheris."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import nkserde
from builders import rewrite_header
from nkserde.errors import CorruptFileError, NkserdeError

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
sys.path.insert(0, str(FUZZ))

import mutators  # noqa: E402
import mutate_netket  # noqa: E402
import targets  # noqa: E402


@pytest.fixture(scope="module")
def templates():
    return targets.templates()


@pytest.fixture(autouse=True)
def fuzz_limits():
    nkserde.set_load_limits(max_load_bytes=targets.MAX_LOAD_BYTES)
    yield
    nkserde.set_load_limits()


@pytest.mark.parametrize("case", sorted(p.name for p in (FUZZ / "regressions").iterdir()))
def test_kept_crash_inputs(case, templates, tmp_path):
    path = tmp_path / case
    path.write_bytes((FUZZ / "regressions" / case).read_bytes())
    assert targets.read_every_way(path, templates, tmp_path) is None


def _mutations_raise_only_nkserde_errors(mutate_fn, corpus, read, path, count, seed):
    """``count`` seeded mutations of the seed corpus, each read by ``read``:
    none may crash; most must apply (else the mutator tests nothing)."""
    rng = random.Random(seed)
    seeds = [p.read_bytes() for p in sorted(corpus.iterdir())]
    applied = 0
    for _ in range(count):
        data = mutate_fn(rng.choice(seeds), rng)
        if data is None:
            continue
        applied += 1
        path.write_bytes(data)
        assert read(path) is None
    assert applied > count // 2


def test_structure_aware_mutations(templates, tmp_path):
    """300 seeded mutations of the seed corpus, read every way: only
    nkserde errors (a few seconds of what fuzz/run does for minutes)."""
    _mutations_raise_only_nkserde_errors(
        mutators.mutate,
        FUZZ / "corpus",
        lambda path: targets.read_every_way(path, templates, tmp_path),
        tmp_path / "m.nks",
        300,
        seed=11,
    )


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "s.nks"
    nkserde.save({"a": np.arange(4.0), "obj": {"k": 1}}, path)
    return path


def test_deep_tree_is_refused_before_anything_recurses(small, tmp_path):
    # found: a tree nested 500 deep loaded, then migrate's encoder hit
    # RecursionError (a raw traceback)
    def change(h):
        deep = 1
        for _ in range(500):
            deep = [deep]
        h["tree"]["obj"] = deep

    rewrite_header(small, change)
    for read in (nkserde.load_state_dict, nkserde.verify, lambda p: nkserde.migrate(p, tmp_path / "m.nks")):
        with pytest.raises(CorruptFileError, match="nested deeper than 128 levels"):
            read(small)


def test_type_name_that_is_a_map(small, tmp_path):
    # found: migrate met {"@type": {...}} and raised TypeError: unhashable
    rewrite_header(small, lambda h: h["tree"].update(obj={"@type": {"a": 1}, "@version": 1}))
    with pytest.raises(CorruptFileError, match="obj: malformed type name"):
        nkserde.migrate(small, tmp_path / "m.nks")
    with pytest.raises(NkserdeError):
        nkserde.load({"a": np.zeros(4), "obj": {"k": 1}}, small)


def test_dtype_that_is_a_map(small):
    # found: {"dtype": {...}} in the index raised TypeError: unhashable
    rewrite_header(small, lambda h: h["arrays"][0].update(dtype={"x": 1}))
    for read in (nkserde.load_state_dict, nkserde.verify):
        with pytest.raises(CorruptFileError, match="array 0: unknown dtype"):
            read(small)


def test_per_process_values_of_different_structures(small, tmp_path):
    # found: a per-process node whose processes' values differ in structure
    # loaded, then migrate raised TypeError re-encoding it
    rewrite_header(small, lambda h: h["tree"].update(obj={"@per_process": [{"a": 1}, {"b": [2]}]}))
    for read in (nkserde.load_state_dict, lambda p: nkserde.migrate(p, tmp_path / "m.nks")):
        with pytest.raises(CorruptFileError, match="per-process values of different structures"):
            read(small)


@pytest.mark.parametrize("shape", [None, 7])
def test_lazy_load_checks_an_entry_before_using_it(small, shape):
    # found: load (lazy reads) took tuple(entry["shape"]) before validating
    # the entry: TypeError
    rewrite_header(small, lambda h: h["arrays"][0].update(shape=shape))
    with pytest.raises(CorruptFileError, match="array 0: malformed shape"):
        nkserde.load({"a": np.zeros(4), "obj": {"k": 1}}, small)
    with pytest.raises(CorruptFileError, match="array 0: malformed shape"):
        nkserde.open(small)


def test_schema_version_that_is_an_array(small, tmp_path):
    # found: migrate copied an "@version" that is an array into the new
    # file's metadata, and msgpack raised TypeError
    rewrite_header(small, lambda h: h["tree"].update(a=1, obj={"@type": "some.Unknown", "@version": {"@array": 0}}))
    with pytest.raises(NkserdeError):
        nkserde.load({"a": np.zeros(4), "obj": {"k": 1}}, small)
    out = nkserde.migrate(small, tmp_path / "m.nks")  # an unknown type is kept as it is
    assert nkserde.info(out)["types"] == {"some.Unknown": None}


# ------------------------------------------------ NetKet's own files (fuzz/fuzz_netket_files.py)


@pytest.fixture(scope="module")
def netket_templates():
    return targets.netket_templates()


@pytest.mark.parametrize("case", sorted(p.name for p in (FUZZ / "regressions_netket").iterdir()))
def test_kept_crash_inputs_of_netket_files(case, netket_templates, tmp_path):
    """variables-not-a-map: AttributeError; zip-version-not-implemented:
    zipfile's NotImplementedError; null-parameter: NetKet's
    ParameterMismatchError; sampler-state-key-not-text: a TypeError sorting
    int and str keys for an error message; count-an-array: an array where
    n_samples belongs, compared with the template's count before it was
    checked (ValueError: the truth value of an array) (each before its fix)."""
    path = tmp_path / case
    path.write_bytes((FUZZ / "regressions_netket" / case).read_bytes())
    assert targets.read_netket_file(path, netket_templates, tmp_path) is None


def test_structure_aware_mutations_of_netket_files(netket_templates, tmp_path):
    """200 seeded zip- and msgpack-aware mutations of the NetKet seed corpus,
    loaded into every template: only nkserde errors."""
    _mutations_raise_only_nkserde_errors(
        mutate_netket.mutate,
        FUZZ / "corpus_netket",
        lambda path: targets.read_netket_file(path, netket_templates, tmp_path),
        tmp_path / "m.nk",
        200,
        seed=5,
    )


def test_history_log_mutations(tmp_path):
    """300 seeded structure-aware mutations of the seed history log
    (fuzz/mutate_history.py), read as a resume reads one: only nkserde
    errors."""
    seed = FUZZ / "corpus" / "history_log.nkh"
    rng = random.Random(5)
    path = tmp_path / "m.nkh"
    applied = 0
    for _ in range(300):
        data = mutators.mutate(seed.read_bytes(), rng)
        if data is None:
            continue
        applied += 1
        path.write_bytes(data)
        found = targets.first_crash(
            [
                ("history log", lambda: targets.read_history_log(path, data, tmp_path)),
                ("resolve histories", lambda: targets.resolve_histories(path, data, tmp_path)),
            ]
        )
        assert found is None, found
    assert applied > 200
