#!/usr/bin/env bash
# The virtualenv bench_vs_pymgrit.py runs PyMGRIT in: pymgrit==1.0.6 calls np.in1d, gone
# from NumPy 2.4, so it gets numpy<2.4, scipy, mpi4py and this interpreter's MPICH wheel.
#   bash benchmarks/setup_pymgrit_env.sh [PYTHON]   (venv: $BRAIDPY_PYMGRIT_VENV, default
#   ~/.cache/braidpy/pymgrit-venv)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${BRAIDPY_PYMGRIT_VENV:-$HOME/.cache/braidpy/pymgrit-venv}"
# shellcheck source=_sidecar_venv.sh
source "$HERE/_sidecar_venv.sh"
make_venv "${1:-python3}" "$VENV" "numpy<2.4" scipy "pymgrit==1.0.6"
"$VENV/bin/python" -c "import mpi4py, numpy, scipy, pymgrit
from importlib import metadata
print('pymgrit', metadata.version('pymgrit'), 'numpy', numpy.__version__)"
echo "PyMGRIT venv ready: $VENV"
