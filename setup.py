"""Thin setuptools driver: CMake builds braidpy._core (see CMakeLists.txt)."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds the extension with CMake; all flags live there."""

    def build_extension(self, ext):
        import pybind11

        out_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        config = [
            "cmake",
            str(ROOT),
            f"-DBRAIDPY_OUTPUT_DIR={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        try:
            import ninja  # noqa: F401

            config.append("-GNinja")
        except ImportError:
            pass
        subprocess.run(config, cwd=build_dir, check=True)
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "--build", ".", "-j", jobs], cwd=build_dir, check=True)


setup(
    ext_modules=[CMakeExtension("braidpy._core")],
    cmdclass={"build_ext": CMakeBuild},
)
