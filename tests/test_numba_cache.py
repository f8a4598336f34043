"""numba's cache for packages that do not ask for one (nkserde.caches.numba_kernels),
on a package of this test's own, in subprocesses (a numba function keeps
its cache for the life of the process): a second process loads what the
first compiled, a change to any file of the package (a callee in another
file included, which numba's own cache misses) compiles again, and what
cannot be read or written costs a compile, not the run. Needs numba only
(``--noconftest`` runs it in a venv of numba alone, as for numba 0.59)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from nkserde.caches import numba_internals, numba_kernels

PACKAGE = {
    "__init__.py": "",
    # f calls g of another file; h caches itself; closure is made in a function
    "kernels.py": """
        import numba
        from .callee import g

        @numba.njit
        def f(x):
            return g(x) + 1

        @numba.njit(cache=True)
        def h(x):
            return x - 1

        def _make(k):
            @numba.njit
            def closure(x):
                return x + k
            return closure

        closure = _make(5)

        class Op:
            @staticmethod
            @numba.njit
            def kernel(x):
                return 3 * x
    """,
    "callee.py": """
        import numba

        @numba.njit
        def g(x):
            return 2 * x
    """,
}

# argv: cache directory, whether to call f before use(), whether this process writes
RUN = """
import json, sys
from nkserde.caches import numba_kernels
import pkgx.kernels as k
if sys.argv[2] == "before":
    k.f(3)
given = numba_kernels.use(sys.argv[1], ("pkgx",), may_write=lambda: sys.argv[3] == "write")
values = [k.f(3), k.Op.kernel(3), k.h(3), k.closure(3)]
stats = {name: [sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values())]
         for name, d in (("f", k.f), ("kernel", k.Op.kernel))}
print(json.dumps({"given": given, "values": values, "stats": stats,
                  "h": type(k.h._cache).__name__, "closure": type(k.closure._cache).__name__}))
"""


def _package(root: Path) -> Path:
    package = root / "pkgx"
    package.mkdir(parents=True, exist_ok=True)
    for name, text in PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text))
    return package


def _run(root: Path, cache: Path, before: bool = False, write: bool = True) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).parents[1])])}
    env["NUMBA_CACHE_DIR"] = str(root / "numbas-own")  # where h (cache=True) goes: not ours
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(cache), "before" if before else "after", "write" if write else "read"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _files(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc"))


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    _package(tmp_path)
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache)
    assert first["given"] == 3  # f, g and the static method; not h (its own cache), not the closure
    assert first["h"] == "FunctionCache" and first["closure"] == "NullCache"
    assert first["values"] == [7, 9, 2, 8]
    assert first["stats"] == {"f": [0, 1], "kernel": [0, 1]}
    assert any(name.startswith("kernels.f-") for name in _files(cache))
    second = _run(tmp_path, cache)
    assert second["values"] == first["values"]
    assert second["stats"] == {"f": [1, 0], "kernel": [1, 0]}  # loaded, not compiled


def test_a_change_to_another_file_of_the_package_compiles_again(tmp_path):
    package = _package(tmp_path)
    cache = tmp_path / "cache"
    assert _run(tmp_path, cache)["values"][0] == 7
    callee = package / "callee.py"
    callee.write_text(callee.read_text().replace("2 * x", "10 * x"))
    os.utime(callee, ns=(callee.stat().st_atime_ns, callee.stat().st_mtime_ns + 10**9))
    again = _run(tmp_path, cache)
    assert again["values"][0] == 31  # f's own file is unchanged: numba's own cache would give 7
    assert again["stats"]["f"] == [0, 1]
    assert _run(tmp_path, cache)["stats"]["f"] == [1, 0]


def test_code_compiled_before_the_call_is_written_by_it(tmp_path):
    _package(tmp_path)
    cache = tmp_path / "cache"
    assert _run(tmp_path, cache, before=True)["stats"]["f"] == [0, 1]
    assert _run(tmp_path, cache)["stats"]["f"] == [1, 0]


def test_a_process_that_may_not_write_reads_only(tmp_path):
    _package(tmp_path)
    cache = tmp_path / "cache"
    reader = _run(tmp_path, cache, write=False)
    assert reader["values"] == [7, 9, 2, 8] and _files(cache) == []
    _run(tmp_path, cache)
    assert _run(tmp_path, cache, write=False)["stats"]["f"] == [1, 0]


def test_a_damaged_cache_costs_a_compile_not_the_run(tmp_path):
    _package(tmp_path)
    cache = tmp_path / "cache"
    _run(tmp_path, cache)
    for path in cache.rglob("*"):
        if path.suffix in (".nbi", ".nbc"):
            path.write_bytes(b"\x80\x04not a pickle" + os.urandom(64))
    damaged = _run(tmp_path, cache)
    assert damaged["values"] == [7, 9, 2, 8] and damaged["stats"]["f"] == [0, 1]
    assert _run(tmp_path, cache)["stats"]["f"] == [1, 0]  # and written again


def test_prune_keeps_the_most_recently_used_files_within_the_bound(tmp_path):
    sub = tmp_path / "pkg_abc"
    sub.mkdir()
    for i in range(4):
        for suffix in (".nbi", ".1.nbc"):
            path = sub / f"m.f{i}-3.py311{suffix}"
            path.write_bytes(b"x" * 500)
            os.utime(path, (1000 + i, 1000 + i))
    (sub / "notes.txt").write_bytes(b"y" * 5000)  # not numba's: left alone
    assert numba_kernels.prune(tmp_path, 2000) == 4
    assert sorted(p.name for p in sub.iterdir()) == [
        "m.f2-3.py311.1.nbc",
        "m.f2-3.py311.nbi",
        "m.f3-3.py311.1.nbc",
        "m.f3-3.py311.nbi",
        "notes.txt",
    ]


def test_a_cache_that_cannot_be_written_costs_a_compile_not_the_run(tmp_path):
    _package(tmp_path)
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache directory would be")
    got = _run(tmp_path, cache)
    assert got["given"] == 3 and got["values"] == [7, 9, 2, 8] and got["stats"]["f"] == [0, 1]
    assert _run(tmp_path, cache)["stats"]["f"] == [0, 1]  # compiled again: nothing could be kept


# The fence around numba's private classes (nkserde.caches.numba_internals),
# in this process: run on each numba release of the CI venvs (VERSION_TESTS
# in .ci/run), so a release that moves them fails here first.


def _kernel():
    import numba

    def triple(x):
        return 3 * x

    return numba.njit(triple)


def test_numba_internals_are_as_this_release_has_them(tmp_path):
    import numba

    assert numba_internals._machinery() != (None, None), f"numba {numba.__version__}"
    kernel = _kernel()
    assert numba_internals.is_cpu_dispatcher(kernel) and not numba_internals.is_cpu_dispatcher(kernel.py_func)
    assert numba_internals.has_no_cache(kernel) and numba_internals.cache_path(kernel) is None
    assert kernel(2) == 6  # compiled before the cache: written when attached
    path = str(tmp_path / "triple")
    assert numba_internals.attach_cache(kernel, path, "stamp 1", lambda: True)
    assert numba_internals.cache_path(kernel) == path and not numba_internals.has_no_cache(kernel)
    assert sorted({p.suffix for p in Path(path).iterdir()}) == sorted(numba_internals.SUFFIXES)
    again = numba.njit(kernel.py_func)  # another process's dispatcher of the same function
    assert numba_internals.attach_cache(again, path, "stamp 1", lambda: True)
    assert again(2) == 6 and sum(again.stats.cache_hits.values()) == 1
    stale = numba.njit(kernel.py_func)  # the package's source changed: another stamp
    assert numba_internals.attach_cache(stale, path, "stamp 2", lambda: True)
    assert stale(2) == 6 and sum(stale.stats.cache_misses.values()) == 1


@pytest.fixture
def numba_as_not_expected(monkeypatch):
    """numba's caching module without the classes nkserde subclasses (as a
    release that renames them would be)."""
    monkeypatch.setattr(
        numba_internals, "_caching", types.SimpleNamespace(NullCache=numba_internals._caching.NullCache)
    )
    numba_internals._machinery.cache_clear()
    monkeypatch.setattr(numba_internals, "_said", False)
    yield
    monkeypatch.undo()
    numba_internals._machinery.cache_clear()


def test_where_numba_is_not_as_expected_its_kernels_compile_without_a_cache(tmp_path, numba_as_not_expected, caplog):
    kernel = _kernel()
    with caplog.at_level(logging.DEBUG, logger="nkserde"):
        assert not numba_internals.attach_cache(kernel, str(tmp_path / "k"), "stamp", lambda: True)
        assert not numba_internals.attach_cache(_kernel(), str(tmp_path / "k"), "stamp", lambda: True)
    assert kernel(2) == 6 and not (tmp_path / "k").exists()
    assert numba_internals.cache_path(kernel) is None and numba_internals.has_no_cache(kernel)
    lines = [r for r in caplog.records if r.name == "nkserde"]
    assert len(lines) == 1 and lines[0].levelno == logging.DEBUG  # one debug line, no traceback
    assert "caching classes are not as expected" in lines[0].getMessage()


def test_a_function_numba_cannot_place_keeps_compiling_as_before(tmp_path, monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise RuntimeError("cannot cache function: no locator available")  # numba's words

    implementation, cache_class = numba_internals._machinery()
    monkeypatch.setattr(cache_class, "__init__", refuse)
    kernel = _kernel()
    monkeypatch.setattr(numba_internals, "_said", False)
    with caplog.at_level(logging.DEBUG, logger="nkserde"):
        assert not numba_internals.attach_cache(kernel, str(tmp_path / "k"), "stamp", lambda: True)
    assert kernel(2) == 6 and numba_internals.has_no_cache(kernel)
    assert "no locator available" in caplog.text
