"""Sphinx configuration: the API reference from the docstrings, and the guides in docs/*.md.

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (tests/test_docs.py does this
with warnings as errors). autodoc imports braidpy from this checkout, so build the
compiled core first (``pip install -e .`` or ``python setup.py build_ext --inplace``).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import braidpy  # noqa: E402


def _missing(modules):
    """The modules of ``modules`` that do not import here."""
    import importlib

    out = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


project = "braidpy"
author = "the braidpy developers"
copyright = "braidpy developers, MIT license"  # noqa: A001 - Sphinx's name
version = release = braidpy.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # numpydoc-style sections of the docstrings
    "myst_parser",  # the guides are Markdown
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# autodoc: the names in each module's __all__, in source order (constants with a #: comment)
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "description"
# The docs extra brings Sphinx alone: the modules that need an optional package (torch,
# matplotlib, ...) are documented against autodoc's stand-ins where it is not installed.
autodoc_mock_imports = _missing(["torch", "matplotlib", "sklearn", "mpi4py", "tqdm", "cupy",
                                 "array_api_compat"])
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

# the guides: GitHub-flavoured Markdown, headings linkable like on GitHub
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

html_theme = "alabaster"
html_static_path = ["_static"]
html_css_files = ["braidpy.css"]
html_title = f"braidpy {release}"


def setup(app):
    # docs/architecture.md draws with a mermaid block (GitHub renders it); here it is text
    from pygments.lexers.special import TextLexer

    app.add_lexer("mermaid", TextLexer)
