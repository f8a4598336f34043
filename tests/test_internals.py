"""Private NetKet, JAX and numba names are used in three places only: the
modules that list them (``nkserde/netket/internals.py``,
``nkserde/jax_internals.py``, ``nkserde/caches/numba_internals.py``) and the
registrations, whose schema is the fields of the type they store
(docs/schema.md). Anywhere else a private name of another library is a use
nobody will find when that library changes: this test names it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nkserde

PACKAGE = Path(nkserde.__file__).parent
# Where private names of NetKet and JAX may be written
INTERNALS = {"netket/internals.py", "jax_internals.py", "caches/numba_internals.py"}
REGISTRATIONS = {
    f"netket/{m}.py"
    for m in ("_common", "callbacks", "configuration", "drivers", "dynamics", "loggers", "optimizers", "pytrees")
} | {"netket/samplers.py", "netket/vqs.py"}
# Public despite the underscore: namedtuple's API
NAMEDTUPLE_API = {"_asdict", "_fields", "_replace", "_make"}
# nkserde's own marker on the classes it makes (checkpoint/wrapper.py)
OWN_PREFIX = "_nkserde"
FOREIGN = ("jax", "jaxlib", "netket", "flax", "optax", "numba")
# Packages that are internal as a whole though no part of their name says so
INTERNAL_PACKAGES = ("numba.core",)


def _private(name: str) -> bool:
    return (
        name.startswith("_")
        and not name.startswith("__")
        and name != "_"
        and not name.startswith(OWN_PREFIX)
        and name not in NAMEDTUPLE_API
    )


def _internal(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in INTERNAL_PACKAGES)


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) of every private name of another object or module in
    ``source``: ``x._name`` (x not self/cls), a string ``"_name"`` (getattr,
    tables of attribute names), an import of a private module or name of
    JAX, NetKet, flax, optax or numba (numba's ``numba.core`` included), a
    string naming such a module."""
    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                uses.append((node.lineno, f"{ast.unparse(node.value)}.{node.attr}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if (text.isidentifier() and _private(text)) or any(f"{lib}._" in text for lib in FOREIGN):
                uses.append((node.lineno, repr(text)))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in FOREIGN:
            if any(part.startswith("_") for part in node.module.split(".")) or _internal(node.module):
                uses.append((node.lineno, f"from {node.module}"))
            uses += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            uses += [
                (node.lineno, f"import {a.name}")
                for a in node.names
                if a.name.split(".")[0] in FOREIGN
                and (any(p.startswith("_") for p in a.name.split(".")) or _internal(a.name))
            ]
    return sorted(uses)


def test_private_names_of_netket_and_jax_are_used_only_in_the_internals_modules_and_registrations():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name in INTERNALS or name in REGISTRATIONS:
            continue
        found += [f"nkserde/{name}:{line}: {what}" for line, what in private_uses(path.read_text())]
    where = "nkserde/netket/internals.py, jax_internals.py, caches/numba_internals.py"
    assert not found, f"private names outside {where}:\n" + "\n".join(found)


def test_the_check_sees_each_kind_of_private_use():
    source = """
import jax._src.mesh
from netket._src.callbacks import x
from jax import _private_function
value = driver._step_count
getattr(log, "_prefix", None)
name = "netket._src.logging"
from numba.core import caching
import numba.core.registry
dispatcher._cache = None
ok = self._mine, cls._ours, point._asdict(), "_nkserde_wrapper", "_", obj.__dict__
from numba import njit
"""
    assert [what for _, what in private_uses(source)] == [
        "import jax._src.mesh",
        "from netket._src.callbacks",
        "from jax import _private_function",
        "driver._step_count",
        "'_prefix'",
        "'netket._src.logging'",
        "from numba.core",
        "import numba.core.registry",
        "dispatcher._cache",
    ]


def test_the_internals_modules_say_what_each_name_relies_on():
    """Every function of the internals modules has a docstring that names a
    release (what it relies on, since when), so the design page's list can say
    what breaks when."""
    for name in INTERNALS:
        tree = ast.parse((PACKAGE / name).read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                doc = ast.get_docstring(node) or ""
                # a release number (0.7.0, 3.21): a digit alone is not one
                assert re.search(r"\d+\.\d+", doc), f"nkserde/{name}: {node.name} does not say since which release"


def _defined_names(module_source: str) -> set[str]:
    """The public functions and UPPER_CASE tables a module defines at its top
    level (also inside a top-level try/if)."""
    names, nodes = set(), list(ast.parse(module_source).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, (ast.Try, ast.If)):
            nodes += node.body + node.orelse + [s for h in getattr(node, "handlers", []) for s in h.body]
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()}
    return names


def test_the_design_page_lists_exactly_the_functions_of_the_internals_modules():
    """docs/explanations/design.md, "What nkserde uses beyond NetKet's and
    JAX's public API" (the README links to it)."""
    readme = (PACKAGE.parent / "docs" / "explanations" / "design.md").read_text()
    section = readme.split("## What nkserde uses beyond NetKet's and JAX's public API", 1)[1].split("\n#", 1)[0]
    for name in INTERNALS:
        listed = section.split(f"`nkserde/{name}`:", 1)[1].split("\n\n", 1)[0]
        # a bullet names its functions and tables before its first ": "
        bullets = ("\n" + listed).split("\n- ")[1:]
        in_readme = {item.split("(")[0] for b in bullets for item in b.split(": ", 1)[0].split("`")[1::2]}
        assert in_readme == _defined_names((PACKAGE / name).read_text()), f"nkserde/{name}"
