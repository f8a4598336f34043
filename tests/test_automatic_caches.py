"""The compilation caches a script gets without asking
(nkserde.caches.automatic): the script as the README shows it, with no
line added, restarts with its compiled code, the template's build included,
whichever of NetKet and nkserde it imports first; and nothing surprises:
``import nkserde`` imports no JAX, a program that only reads files leaves no
cache behind, a cache the user configured is left alone, and
``NKSERDE_COMPILATION_CACHE=off`` turns it off. In subprocesses (the caches
are settings of the whole process), each with a user cache directory
(``XDG_CACHE_HOME``) of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import builders as B
import nkserde

TESTS = Path(__file__).parent

# The README's script (a VMC_SR, built before its Checkpoint), counting
# JAX's persistent-cache hits while it builds and while it runs
README_SCRIPT = """
import json, sys
order, directory, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if order == "nkserde first":
    import nkserde
    import netket as nk
else:
    import netket as nk
    import nkserde
import jax
hits, phase = {"build": 0, "run": 0}, ["build"]
def count(event, **kwargs):
    if event.endswith("cache_hits"):
        hits[phase[0]] += 1
jax.monitoring.register_event_listener(count)
import builders
driver = builders.vmc_sr()
phase[0] = "run"
ckpt = nkserde.Checkpoint(directory, every=1)
driver.run(steps, out=None, show_progress=False, callback=ckpt)
print(json.dumps({"cache": jax.config.jax_compilation_cache_dir, "hits": hits, "resumed": ckpt.resumed_from}))
"""


def _environment(tmp_path: Path, **extra) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_COMPILATION_CACHE", "NKSERDE_"))}
    pythonpath = os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONPATH": pythonpath, **extra}


# Caches of other packages in the XDG cache of a program that imports
# NetKet: matplotlib's font list, where matplotlib is installed (igraph, a
# NetKet dependency, imports it).
OTHER_PACKAGES = {"matplotlib"}


def caches_left(xdg: Path) -> set[str]:
    """The caches a program left in ``xdg``, its XDG_CACHE_HOME, but other packages' own."""
    return set(os.listdir(xdg)) - OTHER_PACKAGES if xdg.exists() else set()


def _python(tmp_path: Path, code: str, *args, **extra) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=_environment(tmp_path, **extra),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def readme_script(tmp_path: Path, order: str, steps: int, **extra) -> tuple[dict, str]:
    """(what README_SCRIPT printed, its stderr) for a run of ``steps`` in
    tmp_path/ckpt."""
    done = _python(tmp_path, README_SCRIPT, order, tmp_path / "ckpt", steps, **extra)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_readme_script_resumes_with_its_build_compiled_code_cached(tmp_path):
    # one import order writes the cache, the other reads it: each pointed
    # JAX at it before the template's build
    first, _ = readme_script(tmp_path, "netket first", 2)
    default = tmp_path / "xdg" / "nkserde" / "jax"
    assert Path(first["cache"]).parent == default and first["resumed"] is None
    resumed, said = readme_script(tmp_path, "nkserde first", 5)  # (the resume line needs three steps)
    assert resumed["resumed"] == 2 and resumed["cache"] == first["cache"]
    # the template's build, before any Checkpoint existed, found its compiled code
    # (a fresh cache has hits too: one process compiling the same module twice)
    assert resumed["hits"]["build"] > first["hits"]["build"] and resumed["hits"]["run"] > first["hits"]["run"]
    assert any((default / Path(first["cache"]).name / "results").glob("*.json"))  # the fingerprint's probes
    assert f"compiled code cached in {first['cache']}" in said  # where the resume's time went


def test_the_switch_turns_every_cache_off(tmp_path):
    for order in ("netket first", "nkserde first"):
        said, _ = readme_script(tmp_path, order, 2, NKSERDE_COMPILATION_CACHE="off")
        assert said["cache"] is None and said["hits"] == {"build": 0, "run": 0}
    assert not caches_left(tmp_path / "xdg")


def test_a_cache_the_user_configured_is_left_alone(tmp_path):
    mine = tmp_path / "mine"
    # as a user caching everything sets it: JAX's default keeps only what
    # took a second to compile, which nothing here does on a quiet machine
    users = {"JAX_COMPILATION_CACHE_DIR": str(mine), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    said, _ = readme_script(tmp_path, "nkserde first", 2, **users)
    assert said["cache"] == str(mine) and any(mine.glob("*-cache"))
    assert not (tmp_path / "xdg" / "nkserde" / "jax").exists() or not any(
        (tmp_path / "xdg" / "nkserde" / "jax").rglob("*-cache")
    )


# configured with jax.config after nkserde pointed JAX at its own, and after
# something compiled: JAX takes the user's from nkserde's next call on
CONFIGURED_LATER = """
import sys
import netket as nk, nkserde, jax, jax.numpy as jnp
jnp.arange(3.0).sum().block_until_ready()  # compiles, in nkserde's cache
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
import builders
driver = builders.vmc()
driver.run(1, out=None, show_progress=False, callback=nkserde.Checkpoint(sys.argv[2], every=1))
print(jax.config.jax_compilation_cache_dir)
"""


def test_a_cache_the_user_configures_after_import_is_taken(tmp_path):
    mine = tmp_path / "mine"
    done = _python(tmp_path, CONFIGURED_LATER, mine, tmp_path / "ckpt")
    assert done.stdout.strip().splitlines()[-1] == str(mine)
    assert any(mine.glob("*-cache"))  # the steps' code went to the user's cache


READS = """
import sys
import netket as nk
import nkserde
import numpy as np
path = sys.argv[1]
nkserde.info(path)
assert set(nkserde.load_state_dict(path)) == {"a", "b"}
loaded = nkserde.load({"a": np.zeros(3), "b": np.zeros((2, 2), np.float32)}, path)
np.testing.assert_array_equal(loaded["a"], np.arange(3.0))
nkserde.verify(path)
from nkserde.cli import main
for command in (["inspect", path], ["verify", path], ["ls", sys.argv[2]], ["diff", path, path]):
    main(command)
"""


def test_a_program_that_only_reads_files_leaves_no_cache_behind(tmp_path):
    path = nkserde.save({"a": np.arange(3.0), "b": np.ones((2, 2), np.float32)}, tmp_path / "data.nks")
    checkpoints = tmp_path / "ckpt"
    B.vmc().run(1, out=None, show_progress=False, callback=nkserde.Checkpoint(checkpoints, every=1, compile_cache=None))
    _python(tmp_path, READS, path, checkpoints)
    assert not caches_left(tmp_path / "xdg")
    for command in (["inspect", path], ["verify", path], ["ls", checkpoints], ["diff", path, path]):
        subprocess.run([sys.executable, "-m", "nkserde", *map(str, command)], env=_environment(tmp_path), check=True)
    assert not caches_left(tmp_path / "xdg")


IMPORTS = """
import json, sys
import nkserde
import nkserde.caches, nkserde.caches.automatic
before = sorted(m for m in ("jax", "numba", "netket") if m in sys.modules)
import jax
at_jax = jax.config.jax_compilation_cache_dir
import netket
from nkserde.caches import automatic
print(json.dumps({
    "before": before,
    "at jax": at_jax,
    "cache": jax.config.jax_compilation_cache_dir,
    "finder left": not any(isinstance(f, automatic._AfterNetKetImport) for f in sys.meta_path),
    "loader": type(netket.__loader__).__name__,
    "spec loader": type(netket.__spec__.loader).__name__,
}))
"""


def test_import_nkserde_imports_no_jax_and_points_jax_at_the_cache_once_netket_is_imported(tmp_path):
    said = json.loads(_python(tmp_path, IMPORTS).stdout)
    assert said["before"] == []
    # not at JAX's import: NetKet's own import compiles constants, which
    # would leave a cache behind a program that only reads a file
    assert said["at jax"] is None
    assert Path(said["cache"]).parent == tmp_path / "xdg" / "nkserde" / "jax"
    assert said["finder left"]  # and netket keeps its own loader
    assert said["loader"] == said["spec loader"] != "_ThenPointJax"
    assert not caches_left(tmp_path / "xdg")  # nothing compiled since: nothing on disk


def test_a_failure_to_set_the_cache_never_fails_the_import_of_netket(tmp_path):
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, format='%(name)s %(message)s')\n"
        "import nkserde\n"
        "sys.modules['nkserde.caches.jax_executables'] = None  # any failure of the first step\n"
        "import netket, jax\n"
        "print(jax.config.jax_compilation_cache_dir)\n"
    )
    done = _python(tmp_path, code)
    assert done.stdout.strip() == "None"
    assert "nkserde JAX's compilation cache is not set (ModuleNotFoundError" in done.stderr
