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


def test_the_reference_covers_the_public_api(html):
    import braidpy

    page = (html / "api.html").read_text()
    documented = set(re.findall(r'id="(braidpy\.[A-Za-z_][\w.]*)"', page))
    modules = {"braidpy": braidpy}
    for name in ("adjoint", "parallel", "backends", "nn", "train", "data", "testing",
                 "plotting"):
        modules[f"braidpy.{name}"] = importlib.import_module(f"braidpy.{name}")
    reexported = {"adjoint", "Gradient", "GradientSolver", "gradient", "wire"}
    missing = [f"{mod}.{name}" for mod, module in modules.items()
               for name in getattr(module, "__all__", [])
               if callable(getattr(module, name))  # functions and classes (constants: if #:)
               and f"{mod}.{name}" not in documented
               and not (mod in ("braidpy", "braidpy.backends") and name in reexported)]
    assert not missing, missing
