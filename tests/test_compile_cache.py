"""Compiled code outlives the process (nkserde.caches): nkserde itself (as
NetKet is imported, nkserde.caches.automatic), a Checkpoint, or
``nkserde.compilation_cache()`` at the top of a script, points JAX's
persistent compilation cache at the user's cache directory and caches
NetKet's numba kernels and the fingerprint's probes beside it, so a resumed
run takes its compiled code from there (JAX and numba count the hits, and
no probe runs again). In subprocesses: the caches are settings of the
whole process."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import builders as B
from test_automatic_caches import caches_left
import nkserde
from nkserde.caches import jax_executables

# counts JAX's persistent-cache hits, then runs a small checkpointed VMC
# (of a numba LocalOperator: numba's kernels, which NetKet does not cache)
RUN = """
import jax, sys
hits = []
jax.monitoring.register_event_listener(lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None)
import builders, netket as nk, nkserde, optax
from nkserde.checkpoint.fingerprint import functions, operators, optimizers
probes = []  # the fingerprint's probes that ran (not taken from the result cache)
counted = lambda f: lambda *a, **k: probes.append(f) or f(*a, **k)
for module, name in (
    (functions, "computed_call"), (optimizers, "computed_updates"), (operators, "computed_action_digest")
):
    setattr(module, name, counted(getattr(module, name)))
options = {} if sys.argv[2] in ("auto", "script") else {"compile_cache": None}
if sys.argv[2] == "script":  # the documented line at the top of a script, with a directory of one's own
    nkserde.compilation_cache(sys.argv[4])
ckpt = nkserde.Checkpoint(sys.argv[1], every=1, **options)
hamiltonian = builders.system()[2].to_local_operator()
if hasattr(hamiltonian, "to_numba_operator"):  # a jax LocalOperator (NetKet >= 3.23) uses numba only to set up
    hamiltonian = hamiltonian.to_numba_operator()
driver = nk.driver.VMC(hamiltonian, optax.adam(1e-2), variational_state=builders.mc_state())
driver.run(int(sys.argv[3]), out=None, show_progress=False, callback=ckpt)
from nkserde.caches import numba_kernels  # NetKet's numba kernels: loaded (hits) or compiled (misses)
kernels = list(numba_kernels._dispatchers(("netket",)))
numba_hits = sum(sum(d.stats.cache_hits.values()) for d in kernels)
numba_misses = sum(sum(d.stats.cache_misses.values()) for d in kernels)
print("cache", jax.config.jax_compilation_cache_dir, "hits", len(hits), "numba", numba_hits, numba_misses, end=" ")
print("probes", len(probes))
"""


def run(tmp_path: Path, ckpt: Path, mode: str, steps: int, **env) -> tuple[str, int]:
    """(JAX's cache directory, its hits)."""
    return run_counting(tmp_path, ckpt, mode, steps, **env)[:2]


def run_counting(
    tmp_path: Path, ckpt: Path, mode: str, steps: int, script_cache: Path | None = None, **env
) -> tuple[str, int, int, int, int]:
    """(JAX's cache directory, its hits, numba's cache hits and misses in
    NetKet's kernels, the fingerprint's probes that ran). ``mode``: "auto"
    (the Checkpoint's default), "off" (``compile_cache=None``) or "script"
    (``nkserde.compilation_cache(script_cache)`` before the Checkpoint)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    environ.update({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONPATH": _pythonpath(), **env})
    arguments = [str(ckpt), mode, str(steps)] + ([str(script_cache)] if script_cache is not None else [])
    done = subprocess.run([sys.executable, "-c", RUN, *arguments], capture_output=True, text=True, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    words = done.stdout.split()
    cache, hits, numba = words.index("cache"), words.index("hits"), words.index("numba")
    probes = int(words[words.index("probes") + 1])
    return words[cache + 1], int(words[hits + 1]), int(words[numba + 1]), int(words[numba + 2]), probes


def _pythonpath() -> str:
    tests = Path(__file__).parent
    return os.pathsep.join([str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")])


def test_a_resumed_run_takes_its_compiled_code_from_the_users_cache(tmp_path):
    first_cache, first_hits, _, compiled, probes = run_counting(tmp_path, tmp_path / "ckpt", "auto", 2)
    assert first_cache.startswith(str(tmp_path / "xdg" / "nkserde" / "jax" / "jax-"))
    assert not Path(first_cache).is_relative_to(tmp_path / "ckpt")  # never in the checkpoint directory
    entries, size = jax_executables.summary(Path(first_cache))
    assert entries > 0 and size > 0
    assert compiled > 0 and any((Path(first_cache) / "numba").rglob("*.nbc"))  # the LocalOperator's kernels
    assert probes > 0 and any((Path(first_cache) / "results").glob("*.json"))  # the fingerprint's probes
    cache, hits, loaded, compiled, probes = run_counting(tmp_path, tmp_path / "ckpt", "auto", 4)  # resumes from step 2
    assert cache == first_cache and hits > 0
    assert loaded > 0 and compiled == 0  # numba compiled none of NetKet's kernels again
    assert probes == 0  # nor did the fingerprint probe anything again


def test_the_switch_turns_the_cache_off_and_compile_cache_none_adds_none_of_its_own(tmp_path):
    # the switch, with a Checkpoint's default compile_cache="auto": no cache
    # of JAX's, numba's kernels or the probes' results anywhere (a cache the
    # user configured is left alone: tests/test_automatic_caches.py)
    cache, hits = run(tmp_path, tmp_path / "ckpt", "auto", 2, NKSERDE_COMPILATION_CACHE="off")
    assert cache == "None" and hits == 0
    assert not caches_left(tmp_path / "xdg")
    # compile_cache=None: the cache nkserde set when NetKet was imported stays
    # (NKSERDE_COMPILATION_CACHE=off, above, is the switch)
    cache, _ = run(tmp_path, tmp_path / "ckpt2", "off", 2)
    assert Path(cache).parent == tmp_path / "xdg" / "nkserde" / "jax"


def test_a_checkpoint_keeps_the_cache_directory_the_script_chose(tmp_path):
    # nkserde.compilation_cache(DIR) at the top, then a Checkpoint of the
    # default compile_cache="auto": everything stays in DIR (the Checkpoint
    # moved JAX's, numba's and the probes' caches to the default directory)
    mine = tmp_path / "mine"
    cache, _, _, compiled, probes = run_counting(tmp_path, tmp_path / "ckpt", "script", 2, script_cache=mine)
    assert cache == str(mine)
    assert compiled > 0 and any((mine / "numba").rglob("*.nbc"))
    assert probes > 0 and any((mine / "results").glob("*.json"))
    assert not caches_left(tmp_path / "xdg")
    cache, hits, loaded, compiled, probes = run_counting(tmp_path, tmp_path / "ckpt", "script", 4, script_cache=mine)
    assert cache == str(mine) and hits > 0 and loaded > 0 and compiled == 0 and probes == 0


# a run (or its resume) that counts JAX's persistent-cache misses of its
# steps: those after the Checkpoint's on_run_start, where a resume restores
RESUME = """
import jax, sys
misses, phase = [], ["build"]
miss = lambda event, **kw: misses.append(phase[0]) if event.endswith("cache_misses") else None
jax.monitoring.register_event_listener(miss)
import numba.core.base
refresh = numba.core.base.BaseContext.refresh  # numba's set-up, before its first compilation or cache load
refreshes = []
numba.core.base.BaseContext.refresh = lambda self: refreshes.append(1) or refresh(self)
import builders, netket as nk, nkserde, optax
nkserde.compilation_cache(sys.argv[2])
if sys.argv[3] == "vmc_sr_jax_local_operator":  # a jax LocalOperator: numba packs its terms at the first step
    hamiltonian = builders.system()[2].to_local_operator()
    driver = nk.driver.VMC_SR(hamiltonian, optax.sgd(1e-2), variational_state=builders.mc_state(), diag_shift=0.1)
else:
    driver = getattr(builders, sys.argv[3])()
class Steps(nk.callbacks.AbstractCallback):
    @property
    def callback_order(self):
        return 10**6  # after the Checkpoint's restore
    def on_run_start(self, step, driver):
        phase[0] = "steps"
ckpt = nkserde.Checkpoint(sys.argv[1], every=1)
amount = float(sys.argv[4]) if "." in sys.argv[4] else int(sys.argv[4])
driver.run(amount, out=None, show_progress=False, callback=[ckpt, Steps()])
print("resumed", ckpt.resumed_from, "misses", misses.count("steps"), "numba", len(refreshes))
"""


def resume_counting(tmp_path: Path, driver: str, first: str, total: str) -> tuple[list[str], list[str]]:
    """What RESUME printed for a run of ``driver`` to ``first`` and for its
    resume to ``total`` (steps, or a time with a dot), both with
    ``nkserde.compilation_cache(tmp_path / "cache")``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    environ["PYTHONPATH"] = _pythonpath()
    said = []
    for amount in (first, total):
        command = [sys.executable, "-c", RESUME, str(tmp_path / "ckpt"), str(tmp_path / "cache"), driver, amount]
        done = subprocess.run(command, capture_output=True, text=True, env=environ)
        assert done.returncode == 0, done.stderr[-3000:]
        said.append(done.stdout.split())
    first_run, resumed = said
    assert first_run[first_run.index("resumed") + 1] == "None"
    assert resumed[resumed.index("resumed") + 1] != "None"
    return first_run, resumed


def _count(said: list[str], what: str) -> int:
    return int(said[said.index(what) + 1])


@pytest.mark.parametrize("driver, first, total", [("vmc_sr_jax_local_operator", "2", "4"), ("tdvp", "0.02", "0.04")])
def test_the_steps_of_a_resumed_run_compile_nothing_its_first_run_did_not(tmp_path, driver, first, total):
    # The state a resume restores has the types, shapes and placement of
    # the state the run had: its steps call NetKet's jitted functions with
    # the arguments they had before the interruption, so every one comes
    # from the compilation cache. (VMC_SR's online statistics restored with
    # Python numbers where NetKet's update had left JAX scalars compiled a
    # third variant of online_statistics on every resume: 0.43 s of XLA for
    # the GCNN of benchmarks/restart.py.)
    first_run, resumed = resume_counting(tmp_path, driver, first, total)
    assert _count(first_run, "misses") > 0
    assert _count(resumed, "misses") == 0, resumed
    if driver.endswith("jax_local_operator"):
        # NetKet packs a jax LocalOperator's terms with numba at its first
        # use; the arrays are kept (nkserde.caches.operator_tables), so the
        # resumed process takes them and numba never sets itself up (0.36 s
        # of the GCNN's resume)
        assert _count(first_run, "numba") > 0
        assert _count(resumed, "numba") == 0, resumed


def test_the_cache_is_per_jax_release_and_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("NKSERDE_COMPILATION_CACHE", str(tmp_path / "c"))
    path = jax_executables.default_directory()
    assert path.parent == tmp_path / "c" and path.name.startswith("jax-")
    monkeypatch.setenv("NKSERDE_COMPILATION_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jax_executables.default_directory().parent == tmp_path / "xdg" / "nkserde" / "jax"


def test_prune_keeps_the_most_recently_used_entries_within_the_bound(tmp_path):
    for i in range(5):
        entry = tmp_path / f"jit_f{i}-abc-cache"
        entry.write_bytes(b"x" * 1000)
        os.utime(entry, (1000 + i, 1000 + i))
    (tmp_path / "jit_f0-abc-atime").write_bytes(b"t")  # not an entry: left alone
    assert jax_executables.prune(tmp_path, 2500) == 3
    assert sorted(p.name for p in tmp_path.glob("*-cache")) == ["jit_f3-abc-cache", "jit_f4-abc-cache"]
    assert (tmp_path / "jit_f0-abc-atime").exists()


def test_a_resumed_run_says_how_long_it_took_and_where_the_time_went(tmp_path, caplog):
    B.vmc().run(2, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1, compile_cache=None))
    with caplog.at_level(logging.INFO, logger="nkserde"):
        B.vmc().run(
            5, out=None, show_progress=False, callback=nkserde.Checkpoint(tmp_path, every=1, compile_cache=None)
        )
    said = textwrap.dedent(caplog.text)
    assert "resumed in " in said and ": loading " in said and ", first step " in said, said
    assert "the step after it" in said


def test_a_cache_entry_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """JAX's put, as nkserde makes it: the entry is written under another
    name and renamed into place, so that another process (the other
    processes of a run read while process 0 writes) never reads a part of
    it, and a writer killed in the middle leaves no truncated entry."""
    from jax._src import lru_cache

    from nkserde import jax_internals

    jax_internals.wrap_file_cache()
    cache = lru_cache.LRUCache(str(tmp_path), max_size=-1)
    value = os.urandom(100_000)
    renames = []
    rename = os.replace

    def watched(source, target):
        # at the rename: the entry is not there yet, all of it is in the temporary file
        renames.append((Path(source).read_bytes() == value, Path(target).exists()))
        rename(source, target)

    monkeypatch.setattr(os, "replace", watched)
    cache.put("jit_f-abc", value)
    assert renames == [(True, False)]
    assert cache.get("jit_f-abc") == value
    assert [p.name for p in tmp_path.iterdir()] == ["jit_f-abc-cache"]  # nothing left beside it

    def killed(source, target):
        raise KeyboardInterrupt  # the writer stopped between its write and the rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        cache.put("jit_g-abc", value)
    assert cache.get("jit_g-abc") is None  # no entry, so JAX compiles and writes it next time
    assert [p.name for p in tmp_path.iterdir()] == ["jit_f-abc-cache"]


def test_prune_deletes_what_a_killed_writer_left_once_it_is_an_hour_old(tmp_path):
    from nkserde import jax_internals

    old = tmp_path / f"{jax_internals.TEMPORARY_ENTRY_PREFIX}jit_f-abc.12.34"
    new = tmp_path / f"{jax_internals.TEMPORARY_ENTRY_PREFIX}jit_g-abc.56.78"  # being written now
    for path in (old, new):
        path.write_bytes(b"x" * 10)
    os.utime(old, (1000, 1000))
    (tmp_path / "jit_h-abc-cache").write_bytes(b"x" * 10)
    jax_executables.prune(tmp_path, 2**20)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([new.name, "jit_h-abc-cache"])


def test_a_skipped_directory_is_neither_read_nor_written(tmp_path):
    """JAX's file cache, as nkserde wraps it, acts as empty in a directory
    its predicate names (nkserde's own, in a run of several processes)."""
    from jax._src import lru_cache

    from nkserde import jax_internals

    jax_internals.wrap_file_cache()
    cache = lru_cache.LRUCache(str(tmp_path), max_size=-1)
    cache.put("jit_f-abc", b"compiled")
    before = jax_internals._skipped
    jax_internals.skip_cache_in(lambda directory: directory == str(tmp_path))
    try:
        assert cache.get("jit_f-abc") is None
        cache.put("jit_g-abc", b"compiled")
    finally:
        jax_internals.skip_cache_in(before)
    assert [p.name for p in tmp_path.iterdir()] == ["jit_f-abc-cache"]
    assert cache.get("jit_f-abc") == b"compiled"  # another directory's predicate: read as before


def test_a_run_of_two_processes_neither_reads_nor_writes_nkserdes_cache(tmp_path, monkeypatch):
    """Two JAX processes (gloo) with nkserde's own cache: JAX would read it
    in process 0 only, and under JAX 0.12.1 a program process 0 found there,
    compiled from other source lines than the other process compiles, hangs
    in its first collective. Entries a first launch wrote into that
    directory (as a cache of the user's own) are not read by a second
    launch, which resumes the first's checkpoints, writes no entry and says
    it had no cache (JAX logs its hits: JAX_LOG_COMPILES)."""
    from multiprocess import launch

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(jax_executables.ENVIRONMENT, raising=False)
    ours = jax_executables.default_directory()
    launch(2, ["ckpt", tmp_path / "run", "vmc", 4, "run"], jax_cache=ours, timeout=600)  # beside a busy suite
    written = sorted(p.name for p in ours.iterdir())
    assert any(name.startswith("jit_") for name in written), written
    outputs = launch(2, ["ckpt", tmp_path / "run", "vmc", 8, "run"], env={"JAX_LOG_COMPILES": "1"}, timeout=600)
    for rank, output in enumerate(outputs):
        assert "Finished XLA compilation" in output, output[-3000:]  # JAX_LOG_COMPILES is heard
        assert "Persistent compilation cache hit" not in output, f"process {rank}:\n{output[-3000:]}"
    assert "resumed in " in outputs[0] and "(no compilation cache)" in outputs[0], outputs[0][-3000:]
    assert sorted(p.name for p in ours.iterdir()) == written
