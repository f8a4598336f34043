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
# NetKet's own theme: what NetKet users know, and code blocks shown whole
# (scrolled, never cut at the edge of a narrow column)
html_theme = "sphinx_book_theme"
html_title = "nkserde"
html_theme_options = {"show_toc_level": 2, "use_download_button": False, "use_fullscreen_button": False}
html_static_path = ["_static"]
html_css_files = ["wide.css"]  # the page as wide as the window: 120-column outputs show whole
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# docstrings write ``code`` in reStructuredText; a plain `x` is code too
default_role = "code"
suppress_warnings = ["myst.header"]
