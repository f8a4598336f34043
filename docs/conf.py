"""Sphinx configuration of nkserde's documentation (MyST markdown, as
NetKet's). Built in CI with warnings as errors:

    sphinx-build -W -b html docs docs/_build/html
"""

project = "nkserde"
author = "the nkserde developers"
copyright = "2026, the nkserde developers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "nkserde"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# docstrings write ``code`` in reStructuredText; a plain `x` is code too
default_role = "code"
suppress_warnings = ["myst.header"]
