"""The documentation cannot rot: the site builds with warnings as errors,
every Python block of the README and of docs/ runs, the command line's
``--help`` texts in docs/reference/cli-help.md are the program's.

A page's Python blocks run in order, in a directory and a namespace of
their own made by tests/docs_system.py (the small system whose names the
snippets use); the README's run on their own. All pages run in one process
(tests/_docs_runner.py), so JAX compiles each function once.
A block that cannot run alone is marked, on the line before it, with
``<!-- not run: why -->``.

    python tests/test_docs.py --write-cli-help   # after changing an option
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>[^>]*?)\s*-->\s*$")
CLI_HELP = DOCS / "reference" / "cli-help.md"
WRITTEN_WITH = (3, 11)  # the Python whose argparse wrote CLI_HELP (CI's main venv)


def python_blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(line, code, why it is not run or None) of every ```python block."""
    return blocks_of(page.read_text())


def blocks_of(text: str) -> list[tuple[int, str, str | None]]:
    blocks = []
    for m in FENCE.finditer(text):
        if m.group("lang") != "python":
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marked = NOT_RUN.search(before)
        indent = m.group("indent")
        code = "".join(
            row[len(indent) :] if row.startswith(indent) else row for row in m.group("body").splitlines(True)
        )
        blocks.append((line, code, marked.group("why") if marked else None))
    return blocks


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _script(page: Path) -> str:
    """The runnable blocks of ``page`` in order, each after a comment naming
    its line (a traceback names the block)."""
    parts = []
    for line, code, why in python_blocks(page):
        if why is None:
            parts.append(f"# --- {_name(page)}:{line}\n{code}" + ("" if code.endswith("\n") else "\n"))
    return "".join(parts)


@pytest.fixture(scope="module")
def snippet_results(tmp_path_factory):
    """Every page's snippets, run once for the module in one process."""
    work = tmp_path_factory.mktemp("docs")
    pages = [{"page": _name(p), "code": _script(p), "system": p.name != "README.md"} for p in PAGES if _script(p)]
    (work / "pages.json").write_text(json.dumps(pages))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    runner = [sys.executable, str(ROOT / "tests" / "_docs_runner.py"), work / "pages.json", work / "results.json", work]
    done = subprocess.run(runner, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((work / "results.json").read_text())


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=_name)
def test_every_python_block_of_a_page_runs(page, snippet_results):
    blocks = python_blocks(page)
    for line, _, why in blocks:
        assert why is None or why.strip(), f"{_name(page)}:{line}: a block marked not run says why"
    if _script(page):
        assert snippet_results[_name(page)] is None, f"{_name(page)}: a block failed\n{snippet_results[_name(page)]}"


def test_the_not_run_marker_is_seen():
    text = (
        "Text.\n\n<!-- not run: needs a cluster -->\n```python\nimport nowhere\n```\n\n"
        "* a list item:\n\n  ```python\n  x = 1\n  ```\n\n```bash\nls\n```\n"
    )
    assert blocks_of(text) == [(4, "import nowhere\n", "needs a cluster"), (10, "x = 1\n", None)]


def cli_help_page() -> str:
    """docs/reference/cli-help.md: ``nkserde --help`` and each command's, at
    100 columns."""
    from nkserde.cli import commands

    parser = commands.build_parser()
    names = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"][0].choices
    sections = [("nkserde --help", [])] + [(f"nkserde {name} --help", [name]) for name in names]
    out = [
        "# Command line `--help`\n",
        "\nWhat `nkserde --help` and `nkserde COMMAND --help` print (checked against the program by\n"
        "tests/test_docs.py; the `--json` layouts are in [the command line reference](../cli.md)).\n",
    ]
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        for title, argv in sections:
            text = io.StringIO()
            with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
                commands.build_parser().parse_args([*argv, "--help"])
            out.append(f"\n## `{title}`\n\n```text\n{text.getvalue().rstrip()}\n```\n")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "".join(out)


def test_the_cli_help_page_is_the_programs():
    page, now = CLI_HELP.read_text(), cli_help_page()
    if sys.version_info[:2] == WRITTEN_WITH:
        assert page == now, "rewrite it: python tests/test_docs.py --write-cli-help"
    else:  # argparse lays options out differently across Pythons: the same options, then
        options = re.compile(r"(?<![\w-])--?[a-z][\w-]*")
        assert sorted(set(options.findall(page))) == sorted(set(options.findall(now)))


def test_the_documentation_builds_without_warnings(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    api = (tmp_path / "html" / "reference" / "api.html").read_text()
    assert api.count("nkserde.load") > 1
    # Checkpoint's and checkpointed's signatures show the options, not a metaclass's (*args, **kwargs)
    for option in ("every", "keep", "async_save"):
        assert api.count(f'sig-param"><span class="n"><span class="pre">{option}</span>') == 2, option
    assert "sphinx-book-theme" in api  # NetKet's theme: code shown whole, not cut at a narrow column


def test_the_api_reference_has_every_public_name():
    import nkserde

    page = (DOCS / "reference" / "api.md").read_text()
    missing = [name for name in nkserde.__all__ if name != "errors" and f":: nkserde.{name}\n" not in page]
    assert not missing, f"docs/reference/api.md lacks {missing}"
    assert "automodule:: nkserde.errors" in (DOCS / "reference" / "errors.md").read_text()


def test_the_readme_says_nothing_the_docs_do_not():
    """The README is the front page: each of its sections is a short
    pointer, and every link into docs/ names a page that exists."""
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), f"README links to a missing page: {target}"
    assert len(readme.splitlines()) < 150
    docs = "".join(p.read_text() for p in PAGES if p.name != "README.md")
    for line, code, _ in python_blocks(ROOT / "README.md"):
        assert code in docs, f"README.md:{line}: this example is in no page of docs/"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-cli-help"]:
        CLI_HELP.write_text(cli_help_page())
    else:
        sys.exit(__doc__)


def test_the_design_page_lists_every_module_once():
    """docs/explanations/design.md's layout has one line per module of the
    package, in its folder: a module added, moved or removed shows here (a
    folder's __init__.py is its folder's line, unless it has one of its own)."""
    page = (DOCS / "explanations" / "design.md").read_text()
    block = page.split("```\nnkserde/\n", 1)[1].split("```", 1)[0]
    listed, folders = [], []
    for line in block.splitlines():
        indent, name = len(line) - len(line.lstrip()), line.split()[0] if line.strip() else ""
        if indent == 0:
            break  # tests/, fuzz/: the repository around the package
        depth = indent // 2
        folders = folders[: depth - 1]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            listed.append("/".join(["nkserde", *folders, name]))
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "nkserde").rglob("*.py")}
    folder_inits = {m for m in modules if m.endswith("/__init__.py") and m != "nkserde/__init__.py"}
    assert len(listed) == len(set(listed))
    assert set(listed) - modules == set()
    assert modules - set(listed) - folder_inits == set()
