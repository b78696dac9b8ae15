"""Packaging: the sdist holds what the build needs; source builds compile the CUDA module
only when asked.

``python -m build --sdist`` and the sdist's members (marked slow: a few seconds). The
sdist's build and install into a fresh environment is tests/test_wheels.py's: the wheel
it installs is built from the sdist by pip, isolated, as ``pip install
braidpy_mgrit-*.tar.gz`` builds one (one compile for both). ``setup.py``'s handling of a
CMake cache left by another environment, and CMake's BRAIDPY_CUDA default, are tested
here without compiling.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What the build needs, relative to the sdist's top folder.
BUILD_INPUTS = ["CMakeLists.txt", "setup.py", "pyproject.toml", "README.md", "LICENSE",
                "MANIFEST.in", "csrc/core/drive.cpp", "csrc/core/solver.hpp",
                "csrc/bindings/module.cpp", "braidpy/__init__.py", "braidpy/_core.pyi",
                "braidpy/py.typed", "docs/conventions.md"]

def run(cmd, **kwargs):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def clean_env():
    """The environment without what points at this checkout or the running Python."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def sdist_members(path):
    with tarfile.open(path) as tar:
        top = tar.getnames()[0].split("/")[0]
        return top, {n[len(top) + 1:] for n in tar.getnames() if n != top}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    if importlib.util.find_spec("build") is None:
        pytest.fail("the packaging tests need `build` (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("dist")
    started = time.perf_counter()
    run([sys.executable, "-m", "build", "--sdist", "--outdir", out, ROOT], env=clean_env(),
        timeout=600)
    print(f"sdist built in {time.perf_counter() - started:.1f} s")
    (path,) = out.glob("braidpy_mgrit-*.tar.gz")
    return path


@pytest.mark.slow
def test_sdist_holds_the_build_inputs(sdist):
    top, members = sdist_members(sdist)
    assert top == sdist.name[: -len(".tar.gz")]
    missing = [f for f in BUILD_INPUTS if f not in members]
    assert not missing, missing
    assert {f for f in members if f.startswith("csrc/")} >= {
        str(p.relative_to(ROOT)) for p in (ROOT / "csrc").rglob("*") if p.is_file()}
    # no build products, no tests or local clutter
    assert not [f for f in members if f.endswith((".so", ".pyd", ".pyc", ".o"))]
    assert not [f for f in members if f.startswith(("build/", "tests/", ".ci/", ".git"))]


# ------------------------------------------------------------------ setup.py's CMake cache


def load_setup_module(monkeypatch):
    """setup.py's helpers, without running setup()."""
    import setuptools

    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)
    spec = importlib.util.spec_from_file_location("braidpy_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_cache(build_dir, **entries):
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "CMakeFiles").mkdir(exist_ok=True)
    lines = ["# This is the CMakeCache file.", "//Path to a program."]
    lines += [f"{key}:{'INTERNAL' if key != 'pybind11_DIR' else 'PATH'}={value}"
              for key, value in entries.items()]
    (build_dir / "CMakeCache.txt").write_text("\n".join(lines) + "\n")


def test_a_cache_from_a_deleted_isolated_environment_is_dropped(tmp_path, monkeypatch):
    setup = load_setup_module(monkeypatch)
    cmake = tmp_path / "bin" / "cmake"
    cmake.parent.mkdir()
    cmake.write_text("")
    pybind = tmp_path / "pybind11"
    pybind.mkdir()
    good = dict(CMAKE_COMMAND=cmake, pybind11_DIR=pybind, BRAIDPY_PYTHON=sys.executable,
                CMAKE_GENERATOR="Ninja")
    build = tmp_path / "build"
    write_cache(build, **good)
    setup._drop_stale_cache(build, "Ninja")
    assert (build / "CMakeCache.txt").is_file(), "a cache of this environment is kept"
    for change in (dict(CMAKE_COMMAND=tmp_path / "gone" / "cmake"),
                   dict(pybind11_DIR=tmp_path / "gone"),
                   dict(BRAIDPY_PYTHON="/elsewhere/python"),
                   dict(CMAKE_GENERATOR="Unix Makefiles")):
        write_cache(build, **{**good, **change})
        setup._drop_stale_cache(build, "Ninja")
        assert not (build / "CMakeCache.txt").exists(), change
        assert not (build / "CMakeFiles").exists(), change


# ------------------------------------------------------------------ BRAIDPY_CUDA in source builds


def cmake_configure(build_dir, cuda_option):
    """CMake's configure step of the Python build, as setup.py runs it (nothing compiled)."""
    pybind11 = pytest.importorskip("pybind11")  # the test extra has it
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed (pip install cmake)"
    build_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "BRAIDPY_CUDA"}
    return subprocess.run([cmake, str(ROOT), f"-DPython_EXECUTABLE={sys.executable}",
                           f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                           "-DCMAKE_BUILD_TYPE=Release", cuda_option],
                          cwd=build_dir, capture_output=True, text=True, env=env, timeout=600)


def test_setup_py_forwards_braidpy_cuda_and_leaves_the_default_to_cmake(monkeypatch):
    setup = load_setup_module(monkeypatch)
    assert setup.cuda_option({}) == "-DBRAIDPY_CUDA="
    assert setup.cuda_option({"BRAIDPY_CUDA": ""}) == "-DBRAIDPY_CUDA="
    assert setup.cuda_option({"BRAIDPY_CUDA": "AUTO"}) == "-DBRAIDPY_CUDA=AUTO"
    assert setup.cuda_option({"BRAIDPY_CUDA": "on "}) == "-DBRAIDPY_CUDA=on"


@pytest.mark.slow
def test_a_source_build_compiles_cuda_only_when_asked(tmp_path, monkeypatch):
    """BRAIDPY_CUDA unset: no braidpy._cuda, and one line saying so where nvcc is; AUTO:
    built where nvcc is, announced before anything compiles; a bad value refused."""
    nvcc = shutil.which("nvcc") or os.environ.get("CUDACXX")
    unset = load_setup_module(monkeypatch).cuda_option({})
    default = cmake_configure(tmp_path / "default", unset)
    assert default.returncode == 0, default.stdout[-3000:] + default.stderr[-3000:]
    assert "braidpy: BRAIDPY_CUDA=OFF, braidpy._cuda built: OFF" in default.stdout
    said = "braidpy: not building braidpy._cuda (BRAIDPY_CUDA=OFF) although nvcc is here"
    assert (said in default.stdout) == bool(nvcc), default.stdout
    auto = cmake_configure(tmp_path / "auto", "-DBRAIDPY_CUDA=AUTO")
    assert auto.returncode == 0, auto.stdout[-3000:] + auto.stderr[-3000:]
    assert f"braidpy._cuda built: {'ON' if nvcc else 'OFF'}" in auto.stdout, auto.stdout
    assert ("braidpy: building braidpy._cuda (BRAIDPY_CUDA=AUTO)" in auto.stdout) == bool(nvcc)
    bad = cmake_configure(tmp_path / "bad", "-DBRAIDPY_CUDA=maybe")
    assert bad.returncode != 0
    assert "BRAIDPY_CUDA must be OFF, ON or AUTO, got 'maybe'" in " ".join(bad.stderr.split())


def test_the_ci_install_asks_for_cuda_as_the_readme_says():
    """Source builds leave braidpy._cuda out unless asked. The developer and CI install
    asks, BRAIDPY_CUDA=AUTO (built wherever nvcc is), so that CI compiles every CUDA
    source and tests/test_cuda.py fails where nvcc is and the module is not."""
    install = 'pip install -e ".[test]"'
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if install in line]
    assert ci == ['BRAIDPY_CUDA=AUTO python -m ' + install], ci
    for page in ("README.md", "docs/install.md"):
        text = (ROOT / page).read_text()
        starts = [i for i in range(len(text)) if text.startswith(install, i)]
        assert starts, page
        for i in starts:
            before = text[:i].removesuffix("python -m ")
            assert before.endswith("BRAIDPY_CUDA=AUTO "), (page, text[max(0, i - 60):i + 30])


def test_the_install_page_documents_the_build():
    install = (ROOT / "docs" / "install.md").read_text()  # the README links it
    assert "docs/install.md" in (ROOT / "README.md").read_text()
    for text in ("python -m build --sdist", "--no-build-isolation", "MANIFEST.in",
                 "python setup.py build_ext --inplace"):
        assert text in install, text


def test_no_build_isolation_needs_the_listed_requirements():
    """docs/install.md's build requirements for --no-build-isolation are pyproject's."""
    tomllib = pytest.importorskip("tomllib")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    names = [r.split(">")[0].split("=")[0].split("<")[0] for r in requires]
    install = (ROOT / "docs" / "install.md").read_text()
    line = next(x for x in install.splitlines() if "pip install" in x and "pybind11" in x)
    assert all(n in line for n in names), (names, line)
    setup_py = (ROOT / "setup.py").read_text()
    assert "pip install " + " ".join(names) in setup_py, textwrap.shorten(setup_py, 200)


def test_the_version_is_written_in_one_place():
    """pyproject takes the version from braidpy.__version__; the citation file and the
    installed metadata (distribution braidpy-mgrit) say the same."""
    import importlib.metadata

    import braidpy

    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["name"] == "braidpy-mgrit"
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "braidpy.__version__"}
    cff = (ROOT / "CITATION.cff").read_text()
    assert f"\nversion: {braidpy.__version__}\n" in cff
    assert importlib.metadata.version("braidpy-mgrit") == braidpy.__version__
