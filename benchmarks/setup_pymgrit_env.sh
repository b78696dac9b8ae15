#!/usr/bin/env bash
# Creates the virtualenv that bench_vs_pymgrit.py runs PyMGRIT in.
#
# PyMGRIT 1.0.6 (the latest on PyPI) calls np.in1d, which NumPy 2.4 removed,
# so it cannot share braidpy's environment. The venv gets numpy<2.4, scipy,
# mpi4py and pymgrit==1.0.6, plus the same MPICH wheel version as the current
# interpreter (when it has one) so that both sides run under the same MPI.
#
# Usage: bash benchmarks/setup_pymgrit_env.sh [PYTHON]
#   PYTHON                 interpreter to base the venv on (default: python3)
#   BRAIDPY_PYMGRIT_VENV   where to create it (default: ~/.cache/braidpy/pymgrit-venv)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

PYTHON="${1:-python3}"
VENV="${BRAIDPY_PYMGRIT_VENV:-$HOME/.cache/braidpy/pymgrit-venv}"

# shellcheck source=_sidecar_venv.sh
source "$HERE/_sidecar_venv.sh"
mpich_req="$(mpich_requirement "$PYTHON")"
make_venv "$PYTHON" "$VENV"
"$VENV/bin/python" -m pip install --quiet "numpy<2.4" scipy "$mpich_req" mpi4py "pymgrit==1.0.6"

"$VENV/bin/python" - <<'EOF'
import mpi4py, numpy, scipy, pymgrit
from importlib import metadata
print(f"pymgrit {metadata.version('pymgrit')}, numpy {numpy.__version__}, "
      f"scipy {scipy.__version__}, mpi4py {mpi4py.__version__}")
EOF
echo "PyMGRIT venv ready: $VENV (bench_vs_pymgrit.py finds it through BRAIDPY_PYMGRIT_VENV)"
