#!/usr/bin/env bash
# Creates the virtualenv that bench_vs_torchbraid.py runs torchbraid in.
#
# torchbraid (github.com/Multilevel-NN/torchbraid) is not on PyPI: it builds from a
# source checkout, and its setup.py compiles XBraid's C library from src/xbraid
# (it would `git clone` XBraid there if absent). This script takes both sources,
# copies them into a build directory, applies two local changes, and installs
# torchbraid into a venv with Cython, mpi4py, numpy, torch==2.13.0 (CPU) and the
# same MPICH wheel version as the current interpreter, so that braidpy and
# torchbraid run under the same MPI.
#
# Local changes to torchbraid's sources (in the build copy only):
#  1. src/torchbraid/test_fixtures/gpumpi_check.h includes "mpi-ext.h", a header
#     only Open MPI has; with MPICH the build stops there ("fatal error: mpi-ext.h:
#     No such file or directory"). The include is made conditional on
#     __has_include (the file only reports CUDA-aware MPI; nothing else uses it).
#  2. src/torchbraid/torchbraid_callbacks.pyx packs and unpacks CPU MPI buffers as
#     C `float` (float32) while sizing them for 8-byte values: float64 states reach
#     the next rank as float32 tensors, and a float64 network stops with "mat1 and
#     mat2 must have the same dtype" on 2 ranks. The three CPU buffer views are made
#     `double`. One rank sends no messages, so one-rank runs do not depend on it.
#
# Usage: bash benchmarks/setup_torchbraid_env.sh TORCHBRAID_SRC XBRAID_SRC [PYTHON]
#   TORCHBRAID_SRC, XBRAID_SRC  source trees, or bare git directories (HEAD is used);
#                               also read from $TORCHBRAID_SRC / $XBRAID_SRC
#   PYTHON                      interpreter to base the venv on (default: python3)
#   BRAIDPY_TORCHBRAID_VENV     where to create it (default: ~/.cache/braidpy/torchbraid-venv)
#   BRAIDPY_TORCHBRAID_BUILD    build directory (default: a new temporary directory)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

TB_SRC="${1:-${TORCHBRAID_SRC:-}}"
XB_SRC="${2:-${XBRAID_SRC:-}}"
PYTHON="${3:-python3}"
VENV="${BRAIDPY_TORCHBRAID_VENV:-$HOME/.cache/braidpy/torchbraid-venv}"
BUILD="${BRAIDPY_TORCHBRAID_BUILD:-$(mktemp -d)}"
if [[ -z "$TB_SRC" || -z "$XB_SRC" ]]; then
  echo "usage: $0 TORCHBRAID_SRC XBRAID_SRC [PYTHON]" >&2
  exit 2
fi

# copy_tree SRC DEST [PATHS...]: a work tree as is, a bare git directory's HEAD
copy_tree() {
  local src="$1" dest="$2"
  shift 2
  mkdir -p "$dest"
  if [[ -f "$src/HEAD" && -d "$src/objects" ]]; then
    # (a snapshot without its large data files makes git print "invalid object" for
    # them even when they are not among PATHS; the archive is complete regardless)
    git --git-dir="$src" archive HEAD "$@" | tar -x -C "$dest"
    echo "$(basename "$(dirname "$src")") $(git --git-dir="$src" rev-parse HEAD)"
  else
    (cd "$src" && tar -c "${@:-.}") | tar -x -C "$dest"
    echo "$src $(git -C "$src" rev-parse HEAD 2>/dev/null || echo '(not a git checkout)')"
  fi
}

rm -rf "$BUILD/torchbraid"
echo "sources:"
# torchbraid: only what the build needs (its repository also holds large data files)
copy_tree "$TB_SRC" "$BUILD/torchbraid" setup.py setup.cfg pyproject.toml README.md \
  MANIFEST.in src
copy_tree "$XB_SRC" "$BUILD/torchbraid/src/xbraid"

cd "$BUILD/torchbraid"
# 1. mpi-ext.h is Open MPI's
python3 - <<'EOF'
p = "src/torchbraid/test_fixtures/gpumpi_check.h"
s = open(p).read()
old = '#include "mpi-ext.h"'
assert old in s, "gpumpi_check.h changed upstream: check the patch"
s = s.replace(old, '#if defined(__has_include)\n#  if __has_include("mpi-ext.h")\n'
                   '#    include "mpi-ext.h"\n#  endif\n#endif\n/* was: ' + old[1:] + ' */', 1)
open(p, "w").write(s)
EOF
# 2. float64 CPU MPI buffers
n_views="$(grep -c '<float\[:size\]> (buffer+start\*get_bytes(float))' src/torchbraid/torchbraid_callbacks.pyx || true)"
if [[ "$n_views" != 3 ]]; then
  echo "torchbraid_callbacks.pyx: expected 3 float buffer views, found $n_views: check the patch" >&2
  exit 1
fi
sed -i 's/<float\[:size\]> (buffer+start\*get_bytes(float))/<double[:size]> (buffer+start*get_bytes(float))/' \
  src/torchbraid/torchbraid_callbacks.pyx

# shellcheck source=_sidecar_venv.sh
source "$HERE/_sidecar_venv.sh"
mpich_req="$(mpich_requirement "$PYTHON")"
make_venv "$PYTHON" "$VENV"
"$VENV/bin/python" -m pip install --quiet "$mpich_req" mpi4py numpy "Cython>=0.29.32" \
  setuptools wheel "torch==2.13.0"
# The venv's mpicc (from the mpich wheel) compiles XBraid and the extensions; no
# build isolation (it would fetch an unpinned torch), no dependencies (torchvision and
# matplotlib are only for torchbraid's examples).
PATH="$VENV/bin:$PATH" "$VENV/bin/python" -m pip install --no-build-isolation --no-deps .

cd /
"$VENV/bin/python" - <<'EOF'
from importlib import metadata
import Cython, mpi4py, numpy, torch
import torchbraid  # noqa: F401  (the compiled extension loads)
from mpi4py import MPI
print(f"torchbraid {metadata.version('torchbraid')}, torch {torch.__version__}, "
      f"numpy {numpy.__version__}, mpi4py {mpi4py.__version__}, Cython {Cython.__version__}, "
      f"{MPI.Get_library_version().splitlines()[0].strip()}")
EOF
echo "torchbraid venv ready: $VENV (bench_vs_torchbraid.py finds it through BRAIDPY_TORCHBRAID_VENV)"
