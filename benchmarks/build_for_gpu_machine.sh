#!/usr/bin/env bash
# Build braidpy's extensions (braidpy._core, braidpy._cuda with sm_80/90) HERE for the
# Python of the GPU machines (3.12; this machine needs that Python, e.g. pyenv's), so
# that a run there can skip its own build (about 85 s).
# The .so files land in braidpy/ beside this machine's own; carry them with the run:
#   carry: [".whl", "braidpy/_core.cpython-312-x86_64-linux-gnu.so",
#           "braidpy/_cuda.cpython-312-x86_64-linux-gnu.so"]
# gpu_check.sh then skips its build step when both are newer than every source.
#
#   bash benchmarks/build_for_gpu_machine.sh [PYTHON]   # default: pyenv's 3.12
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$(ls -d /root/.pyenv/versions/3.12.*/bin/python 2>/dev/null | tail -n 1)}
if [ -z "$PY" ] || ! "$PY" -c 'import sys; assert sys.version_info[:2] == (3, 12)'; then
    echo "need a Python 3.12 (the GPU machines'): pass its path" >&2
    exit 2
fi
"$PY" -m pip install -q pybind11 setuptools wheel cmake ninja numpy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git ls-files -z | xargs -0 cp --parents -t "$work"
(cd "$work" && BRAIDPY_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PY" setup.py -q build_ext \
    --inplace > "$work/build.log" 2>&1) || { tail -n 30 "$work/build.log"; exit 1; }
cp "$work"/braidpy/*cpython-312*.so braidpy/
ls -l braidpy/*cpython-312*.so
