#!/usr/bin/env bash
# Creates the virtualenv that bench_vs_pymgrit.py runs PyMGRIT in: PyMGRIT 1.0.6 (the latest
# on PyPI) calls np.in1d, which NumPy 2.4 removed, so it cannot share braidpy's environment.
# The venv gets numpy<2.4, scipy, mpi4py, pymgrit==1.0.6 and the current interpreter's
# MPICH wheel version (when it has one), so that both sides run under the same MPI.
#
# Usage: bash benchmarks/setup_pymgrit_env.sh [PYTHON]
#   PYTHON                 the venv's base interpreter (default: python3)
#   BRAIDPY_PYMGRIT_VENV   the venv (default: ~/.cache/braidpy/pymgrit-venv)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON="${1:-python3}"
VENV="${BRAIDPY_PYMGRIT_VENV:-$HOME/.cache/braidpy/pymgrit-venv}"
# shellcheck source=_sidecar_venv.sh
source "$HERE/_sidecar_venv.sh"
make_venv "$PYTHON" "$VENV" "numpy<2.4" scipy "pymgrit==1.0.6"
"$VENV/bin/python" - <<'EOF2'
import mpi4py, numpy, scipy, pymgrit  # noqa: F401
from importlib import metadata
print(f"pymgrit {metadata.version('pymgrit')}, numpy {numpy.__version__}, "
      f"scipy {scipy.__version__}, mpi4py {mpi4py.__version__}")
EOF2
echo "PyMGRIT venv ready: $VENV (bench_vs_pymgrit.py finds it through BRAIDPY_PYMGRIT_VENV)"
