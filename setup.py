"""Thin setuptools driver: CMake builds braidpy._core and, when asked, the optional
braidpy._cuda (CMakeLists.txt; environment variable BRAIDPY_CUDA=OFF (default)|ON|AUTO).

All compiler flags live in CMakeLists.txt. The build needs the packages of
``[build-system].requires`` in pyproject.toml: pip installs them in an isolated
environment by default; with ``--no-build-isolation`` they must already be installed.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()
BUILD_DEPS = "pip install setuptools wheel pybind11 cmake ninja"


def cuda_option(environ) -> str:
    """CMake's -DBRAIDPY_CUDA from the environment variable: always passed, so that a value
    cached by an earlier build is not reused; empty means CMakeLists.txt's default (OFF)."""
    return f"-DBRAIDPY_CUDA={environ.get('BRAIDPY_CUDA', '').strip()}"


class CMakeExtension(Extension):
    def __init__(self, name, optional=False):
        super().__init__(name, sources=[], optional=optional)


def _cmake() -> str:
    """The cmake of this build's environment (the isolated one's, or the user's)."""
    found = shutil.which("cmake")
    if found is None:
        try:  # the cmake wheel, installed but its scripts directory not on PATH
            import cmake

            found = str(Path(cmake.CMAKE_BIN_DIR) / "cmake")
        except ImportError:
            sys.exit(f"building braidpy needs CMake >= 3.18 (with --no-build-isolation: "
                     f"{BUILD_DEPS})")
    return found


def _generator() -> str:
    try:
        import ninja  # noqa: F401

        return "Ninja"
    except ImportError:
        return "Unix Makefiles" if os.name != "nt" else ""


def _drop_stale_cache(build_dir: Path, generator: str) -> None:
    """Forget a CMake cache that another environment configured.

    An isolated build leaves paths into its temporary environment (cmake, pybind11) in
    CMakeCache.txt, and pip deletes that environment afterwards; the next build, isolated
    or not, would call the deleted cmake, or refuse a different generator or Python.
    Such a cache is dropped and the build configured afresh.
    """
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return
    entries = {}
    for line in cache.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and ":" in key and not key.startswith(("//", "#")):
            entries[key.split(":")[0]] = value
    stale = (not Path(entries.get("CMAKE_COMMAND", "")).is_file()
             or not Path(entries.get("pybind11_DIR", "")).is_dir()
             or entries.get("BRAIDPY_PYTHON") != sys.executable
             or (generator and entries.get("CMAKE_GENERATOR") != generator))
    if stale:
        cache.unlink()
        shutil.rmtree(build_dir / "CMakeFiles", ignore_errors=True)


class CMakeBuild(build_ext):
    """Configures and builds the extensions with CMake; all flags live there."""

    def build_extension(self, ext):
        if ext.name == "braidpy._cuda":
            return  # built (or not: BRAIDPY_CUDA) by the one CMake build of _core
        try:
            import pybind11
        except ImportError:
            sys.exit(f"building braidpy needs pybind11 (with --no-build-isolation: "
                     f"{BUILD_DEPS})")

        cmake, generator = _cmake(), _generator()
        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        _drop_stale_cache(build_dir, generator)
        config = [
            cmake,
            str(ROOT),
            f"-DBRAIDPY_OUTPUT_DIR={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DBRAIDPY_PYTHON:INTERNAL={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            "-DCMAKE_BUILD_TYPE=Release",
            cuda_option(os.environ),  # braidpy._cuda: OFF (default), ON or AUTO
        ]
        if generator:
            config.append(f"-G{generator}")
        subprocess.run(config, cwd=build_dir, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        subprocess.run([cmake, "--build", ".", "-j", jobs], cwd=build_dir, check=True)


setup(
    # One CMake build makes both; _cuda is optional (copied in place only if built).
    ext_modules=[CMakeExtension("braidpy._core"), CMakeExtension("braidpy._cuda", optional=True)],
    cmdclass={"build_ext": CMakeBuild},
)
