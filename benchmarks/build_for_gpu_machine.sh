#!/usr/bin/env bash
# Builds braidpy's extensions (braidpy._core, braidpy._cuda with sm_80/90) HERE for the GPU
# machines' Python 3.12, into braidpy/ beside this machine's own, so that gpu_check.sh there
# skips its build (about 85 s) when both are newer than every source; carry the two .so files.
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
