"""A jax LocalOperator's arrays, kept between processes
(nkserde.caches.operator_tables): the arrays read back are the ones numba packs,
dtype, shape and bytes; a damaged or foreign file is packed again; without
a result cache nothing is kept."""

from __future__ import annotations

import netket as nk
import numpy as np
import pytest
from netket.operator._local_operator import compile_helpers

from nkserde.caches import operator_tables, results


@pytest.fixture
def packing(monkeypatch, tmp_path):
    """(pack, calls): NetKet's packing of a jax LocalOperator's terms, and
    how many terms numba packed (its ``_append_matrix``)."""
    assert operator_tables.use()
    calls = []
    append = compile_helpers._append_matrix
    monkeypatch.setattr(compile_helpers, "_append_matrix", lambda *a: calls.append(1) or append(*a))
    yield compile_helpers.pack_internals_jax, calls
    results.use(None)


def _operator():
    hilbert = nk.hilbert.Spin(0.5, N=4, total_sz=0)
    operator = nk.operator.Heisenberg(hilbert, nk.graph.Chain(4))
    if hasattr(operator, "to_jax_operator"):  # NetKet < 3.23: a numba operator by default
        operator = operator.to_jax_operator()
    return hilbert, dict(operator._operators_dict), operator.constant, operator.dtype, operator.mel_cutoff


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        if isinstance(a[name], list):
            assert len(a[name]) == len(b[name])
            for x, y in zip(a[name], b[name]):
                assert x.dtype == y.dtype and x.shape == y.shape and np.asarray(x).tobytes() == np.asarray(y).tobytes()
        else:
            assert a[name] == b[name], name


def test_the_arrays_read_back_are_the_ones_numba_packs(packing, tmp_path):
    pack, calls = packing
    results.use(None)
    reference = pack(*_operator())
    assert calls and not (tmp_path / "results").exists()  # no result cache: nothing kept
    results.use(tmp_path / "results")
    calls.clear()
    first = pack(*_operator())
    assert calls and len(list((tmp_path / "results").glob("*.json"))) == 1
    calls.clear()
    again = pack(*_operator())  # as a resumed process: from the file
    assert not calls
    _same(reference, first)
    _same(reference, again)


def test_a_damaged_file_is_packed_again(packing, tmp_path):
    pack, calls = packing
    results.use(tmp_path / "results")
    reference = pack(*_operator())
    (kept,) = (tmp_path / "results").glob("*.json")
    kept.write_bytes(kept.read_bytes()[:-40] + b"x" * 40)
    calls.clear()
    _same(reference, pack(*_operator()))
    assert calls


def test_another_operator_is_another_result(packing, tmp_path):
    pack, calls = packing
    results.use(tmp_path / "results")
    hilbert, terms, constant, dtype, cutoff = _operator()
    pack(hilbert, terms, constant, dtype, cutoff)
    changed = {sites: 2 * matrix for sites, matrix in terms.items()}
    calls.clear()
    doubled = pack(hilbert, changed, constant, dtype, cutoff)
    assert calls and len(list((tmp_path / "results").glob("*.json"))) == 2
    results.use(None)
    _same(compile_helpers.pack_internals_jax(hilbert, changed, constant, dtype, cutoff), doubled)


def test_a_result_that_is_not_tables_is_packed_again(packing, tmp_path, monkeypatch):
    # whole files (their checksums match) that put() of this module did not write
    pack, calls = packing
    results.use(tmp_path / "results")
    reference = pack(*_operator())
    values = ([1, 2], {"x": ["array", "|O", [1], ""]}, {"x": ["what"]}, {"x": []}, "text")
    for foreign in (*values, *({"value": value} for value in values)):
        monkeypatch.setattr(results, "get", lambda key, value=foreign: value)
        calls.clear()
        _same(reference, pack(*_operator()))
        assert calls, foreign
