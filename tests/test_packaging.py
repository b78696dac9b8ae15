"""Packaging: the sdist holds what the build needs and installs into a fresh environment.

``python -m build --sdist``, then ``pip install dist/braidpy_mgrit-*.tar.gz`` into a new
virtual environment (pip's build isolation, build requirements from PyPI), then a serial
solve there, from the installed copy, with no MPI installed. Marked slow: it compiles
the C++ core once (a minute or two on two cores). ``setup.py``'s handling of a CMake
cache left by another environment is tested here too, without compiling.
"""

import importlib.util
import os
import subprocess
import sys
import tarfile
import textwrap
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What the build needs, relative to the sdist's top folder.
BUILD_INPUTS = ["CMakeLists.txt", "setup.py", "pyproject.toml", "README.md", "LICENSE",
                "MANIFEST.in", "csrc/core/drive.cpp", "csrc/core/solver.hpp",
                "csrc/bindings/module.cpp", "braidpy/__init__.py", "braidpy/_core.pyi",
                "braidpy/py.typed", "docs/conventions.md"]

SOLVE = """
import importlib.util
import sys
from pathlib import Path

import numpy as np
import braidpy

class Decay(braidpy.App):
    def init(self, t):
        return np.ones(1) if t == self.tstart else np.zeros(1)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)

here = Path(braidpy.__file__).resolve()
assert Path(sys.prefix).resolve() in here.parents, f"braidpy from {here}, not the venv"
assert importlib.util.find_spec("mpi4py") is None, "the base install brought mpi4py"
assert braidpy.parallel.world() is None
result = braidpy.solve(Decay(), tstart=0.0, tstop=5.0, ntime=4096, cfactor=4, abs_tol=1e-10)
print("solved", result.iterations, repr(result.final[0]))
"""


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


@pytest.mark.slow
def test_sdist_installs_into_a_fresh_venv_and_solves(sdist, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    # The CPU package only: braidpy._cuda is built and tested by the main install
    # (tests/test_cuda.py); compiling it twice would only add build time.
    env = dict(clean_env(), BRAIDPY_CUDA="OFF")
    started = time.perf_counter()
    run([python, "-m", "pip", "install", "--quiet", sdist], env=env, cwd=tmp_path, timeout=900)
    print(f"sdist installed (core compiled) in {time.perf_counter() - started:.1f} s")
    proc = run([python, "-c", SOLVE], env=env, cwd=tmp_path, timeout=120)
    assert proc.stdout.startswith("solved ")
    # the console script is there and works without the training extras
    script = env_dir / ("Scripts" if os.name == "nt" else "bin") / "braidpy"
    assert "peaks" in run([script, "train", "--help"], env=env, cwd=tmp_path, timeout=60).stdout


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
