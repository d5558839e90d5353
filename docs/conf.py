"""Sphinx configuration for the quest_geometric documentation (built with ``-W``)."""
from __future__ import annotations

import datetime
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import quest_geometric  # noqa: E402

project = "quest_geometric"
author = "quest_geometric developers"
copyright = f"{datetime.date.today().year}, {author}"
release = quest_geometric.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    # MathJax 3 shipped in a PyPI package and copied into _static/mathjax: formulas render
    # without network (the default loads MathJax from a CDN). tests/test_docs_browser.py.
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "_scripts"]
root_doc = "index"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# Type hints name many third-party classes; do not fail the strict build on them.
nitpicky = False
suppress_warnings = ["myst.header"]

# No network at build time: intersphinx inventories are not fetched.
intersphinx_mapping: dict = {}

html_theme = "furo"
html_title = "quest_geometric"
html_static_path = ["_static"]

# "Attributes:" sections become :ivar: fields, so they do not create object descriptions that
# clash with autodoc's own (NamedTuple fields, dataset attributes).
napoleon_use_ivar = True


def _skip_namedtuple_fields(app, what, name, obj, skip, options):
    doc = getattr(obj, "__doc__", "") or ""
    if doc.startswith("Alias for field number"):
        return True
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_namedtuple_fields)
