"""The documentation: Sphinx builds the API reference and the guides with warnings as errors."""

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    for module in ("sphinx", "myst_parser"):
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"building the docs needs {module} (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("html")
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
         "-d", str(out / ".doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    print(f"sphinx-build took {time.perf_counter() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_docs_build_without_warnings(html):
    assert (html / "index.html").is_file()


def test_every_guide_is_a_page(html):
    guides = sorted(p.stem for p in DOCS.glob("*.md") if p.stem != "index")
    assert guides, "docs/*.md"
    for name in guides:
        assert (html / f"{name}.html").is_file(), name
    readme = (ROOT / "README.md").read_text()
    for name in guides:  # the README links the guides where they are
        assert f"docs/{name}.md" in readme, name


#: The public modules, each with its page of the API reference (docs/api_NAME.rst).
PUBLIC_MODULES = ("braidpy", "adjoint", "parallel", "backends", "nn", "perf", "train", "torch",
                  "data", "testing", "plotting", "integrators", "problems", "petsc")


def test_the_reference_covers_the_public_api(html):
    """Every callable in a public module's __all__ is documented on that module's page."""
    import braidpy

    index = (html / "api.html").read_text()
    reexported = {"adjoint", "Gradient", "GradientSolver", "gradient", "wire"}
    missing = []
    for name in PUBLIC_MODULES:
        mod = "braidpy" if name == "braidpy" else f"braidpy.{name}"
        module = braidpy if name == "braidpy" else importlib.import_module(mod)
        page = html / f"api_{name}.html"
        assert page.is_file(), f"no reference page for {mod} (docs/api_{name}.rst)"
        assert f'href="api_{name}.html"' in index, f"api.html does not list {page.name}"
        documented = set(re.findall(r'id="(braidpy\.[A-Za-z_][\w.]*)"', page.read_text()))
        missing += [f"{mod}.{n}" for n in getattr(module, "__all__", [])
                    if callable(getattr(module, n))  # functions, classes (constants: if #:)
                    and f"{mod}.{n}" not in documented
                    and not (mod in ("braidpy", "braidpy.backends") and n in reexported)]
    assert not missing, missing
    # every page of the reference is one of these (a new module gets its name above)
    pages = {p.stem for p in DOCS.glob("api_*.rst")}
    assert pages == {f"api_{name}" for name in PUBLIC_MODULES}, pages


#: Runs sphinx-build with the optional packages hidden, as after `pip install -e ".[docs]"`
#: alone: every import of one of them fails as if it were not installed.
_WITHOUT_OPTIONAL_PACKAGES = """
import importlib.abc, sys
HIDDEN = {"torch", "matplotlib", "sklearn", "mpi4py", "tqdm", "cupy", "array_api_compat",
          "petsc4py"}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
import sphinx.cmd.build
sys.exit(sphinx.cmd.build.main(sys.argv[1:]))
"""


def test_docs_build_from_the_docs_extra_alone(tmp_path):
    """The docs extra (Sphinx, myst-parser) builds the site with -W although autodoc
    imports modules that need torch, matplotlib or mpi4py (docs/conf.py mocks the missing
    ones); the API page of braidpy.torch still documents LayerParallel."""
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OPTIONAL_PACKAGES, "-W", "--keep-going", "-E", "-q",
         "-b", "html", "-d", str(tmp_path / ".doctrees"), str(DOCS), str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LayerParallel" in (tmp_path / "api_torch.html").read_text()


def test_long_command_lines_wrap_on_the_pages(html):
    """Code blocks wrap (docs/_static/braidpy.css) rather than hide the end of a long
    command behind a scroll bar, which printed pages cut off."""
    assert '_static/braidpy.css' in (html / "install.html").read_text()
    css = (html / "_static" / "braidpy.css").read_text()
    assert re.search(r"pre\s*\{[^}]*white-space:\s*pre-wrap", css), css
