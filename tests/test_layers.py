"""The floors of the package, as each folder's ``__init__`` docstring states
them (its ``Imports:`` line), held against the code: a module of a folder
imports (at its top or inside a function) its own folder and what that
line names, nothing else; no folder imports one that imports it; the root
holds the public surface and the ground every folder stands on
(docs/explanations/design.md draws the house). Read from the sources: no
module is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import nkserde

PACKAGE = Path(nkserde.__file__).parent
# the root's modules every folder may stand on, and what each of them imports
GROUND = {"errors": set(), "_warnings": set(), "jax_internals": set(), "_log": {"jax_internals"}}
# the public surface: the names nkserde binds (imports any floor), and the
# former home of its functions, kept for a release (imports nothing)
SURFACE = {"__init__", "__main__", "_public", "api"}
FOLDERS = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def _module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _is_module(parts: list[str]) -> bool:
    where = PACKAGE.parent.joinpath(*parts)
    return (where / "__init__.py").is_file() or where.with_suffix(".py").is_file()


def imported_modules(path: Path) -> set[tuple[str, ...]]:
    """The modules of nkserde that the module at ``path`` imports anywhere in
    it (at its top or inside a function), as dotted parts."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                module = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "nkserde":
                module = node.module.split(".")
            else:
                continue
            # ``from . import x``: the module x where there is one, else a name of the module
            found |= {tuple(module + [a.name]) if _is_module(module + [a.name]) else tuple(module) for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {tuple(a.name.split(".")) for a in node.names if a.name.split(".")[0] == "nkserde"}
    return found


def imported(path: Path) -> set[str]:
    """The top-level parts of nkserde (a folder, or a module of the root)
    that the module at ``path`` imports; the package itself (its
    ``__version__``) is none."""
    return {module[1] for module in imported_modules(path) if len(module) > 1}


def may_import(folder: str) -> set[str]:
    """What the ``Imports:`` line of ``folder``'s docstring names: folders
    (``format/``) and modules of the root (``errors``); remarks in
    parentheses aside."""
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
    line = re.search(r"^Imports: (.*?)(?:\n\n|\Z)", doc, re.M | re.S)
    assert line, f"nkserde/{folder}/__init__.py: its docstring has no 'Imports:' line"
    text = re.sub(r"\([^)]*\)", "", line.group(1)).replace("\n", " ")
    return {word.strip(" .").rstrip("/") for word in text.split(",") if word.strip(" .")}


def folder_imports(folder: str) -> dict[str, set[str]]:
    """What the modules of ``folder`` (its subfolders too) import of other parts, by module."""
    out = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        out[str(path.relative_to(PACKAGE.parent))] = imported(path) - {folder}
    return out


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_folder_imports_what_its_docstring_says_and_nothing_else(folder):
    allowed = may_import(folder)
    assert allowed <= set(FOLDERS) | set(GROUND), f"{folder}: its Imports: line names {allowed}"
    beyond = {m: sorted(found - allowed) for m, found in folder_imports(folder).items() if found - allowed}
    assert not beyond, f"imports that nkserde/{folder}/__init__.py does not allow: {beyond}"


def test_no_folder_imports_one_that_imports_it():
    graph = {f: set().union(*folder_imports(f).values()) & set(FOLDERS) for f in FOLDERS}

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph[start])

    circles = sorted(f for f in FOLDERS if reaches(f, f))
    assert not circles, f"folders that reach themselves through their imports: {circles}"


def test_the_format_knows_no_registry():
    """format/ stands on types/ for a state dict's values over processes
    (placement.py) and its walk (nested.py), never on the registry of
    types, its migrations or its registrations."""
    for path in sorted((PACKAGE / "format").rglob("*.py")):
        types = {m[2] for m in imported_modules(path) if m[:2] == ("nkserde", "types") and len(m) > 2}
        assert types <= {"placement", "nested"}, f"nkserde/format/{path.name} imports types/{sorted(types)}"


def test_the_root_is_the_public_surface_and_the_ground():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == SURFACE | set(GROUND), sorted(modules)
    assert len(modules - {"__init__", "__main__"}) <= 6
    for name, allowed in GROUND.items():
        assert imported(PACKAGE / f"{name}.py") <= allowed, name


def test_no_module_climbs_back_into_the_public_api():
    """The Checkpoint, the command line and every other part reach the save
    and the load where they live, never through nkserde's public face."""
    climbing = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.parent != PACKAGE and imported(path) & {"api", "_public"}
    ]
    assert not climbing, climbing
