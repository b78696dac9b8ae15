#!/usr/bin/env bash
# The virtualenv `bench_torch.py --torchbraid` runs torchbraid in (github.com/Multilevel-NN/
# torchbraid, not on PyPI; its setup.py compiles XBraid from src/xbraid): Cython, mpi4py,
# numpy, torch==2.13.0 (CPU), this interpreter's MPICH wheel, and two patches:
#  1. gpumpi_check.h includes Open MPI's "mpi-ext.h" (MPICH stops there): made conditional.
#  2. torchbraid_callbacks.pyx views CPU MPI buffers as C float while sizing them for 8-byte
#     values, so float64 states reach the next rank as float32: the three views become double.
#   bash benchmarks/setup_torchbraid_env.sh TORCHBRAID_SRC XBRAID_SRC [PYTHON]
# (source trees or bare git directories; venv $BRAIDPY_TORCHBRAID_VENV, default
# ~/.cache/braidpy/torchbraid-venv; build directory $BRAIDPY_TORCHBRAID_BUILD, default a new one)
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
    git --git-dir="$src" archive HEAD "$@" | tar -x -C "$dest"
    echo "$(basename "$(dirname "$src")") $(git --git-dir="$src" rev-parse HEAD)"
  else
    (cd "$src" && tar -c "${@:-.}") | tar -x -C "$dest"
    echo "$src $(git -C "$src" rev-parse HEAD 2>/dev/null || echo '(not a git checkout)')"
  fi
}

rm -rf "$BUILD/torchbraid"
echo "sources:"  # torchbraid: only what the build needs (its repository holds large data)
copy_tree "$TB_SRC" "$BUILD/torchbraid" setup.py setup.cfg pyproject.toml README.md \
  MANIFEST.in src
copy_tree "$XB_SRC" "$BUILD/torchbraid/src/xbraid"
cd "$BUILD/torchbraid"
python3 - <<'PYEOF'
p = "src/torchbraid/test_fixtures/gpumpi_check.h"
s, old = open(p).read(), '#include "mpi-ext.h"'
assert old in s, "gpumpi_check.h changed upstream: check the patch"
new = ('#if defined(__has_include)\n#  if __has_include("mpi-ext.h")\n#    include "mpi-ext.h"\n'
       '#  endif\n#endif\n/* was: ' + old[1:] + ' */')
open(p, "w").write(s.replace(old, new, 1))
p = "src/torchbraid/torchbraid_callbacks.pyx"
s, old = open(p).read(), "<float[:size]> (buffer+start*get_bytes(float))"
assert s.count(old) == 3, f"{p}: expected 3 float buffer views: check the patch"
open(p, "w").write(s.replace(old, "<double[:size]> (buffer+start*get_bytes(float))"))
PYEOF

# shellcheck source=_sidecar_venv.sh
source "$HERE/_sidecar_venv.sh"
make_venv "$PYTHON" "$VENV" numpy "Cython>=0.29.32" setuptools wheel "torch==2.13.0"
# No build isolation (it would fetch an unpinned torch), no dependencies (torchvision,
# matplotlib: torchbraid's examples only).
PATH="$VENV/bin:$PATH" "$VENV/bin/python" -m pip install --no-build-isolation --no-deps .
cd /
"$VENV/bin/python" - <<'PYEOF'
from importlib import metadata
import Cython, mpi4py, numpy, torch
import torchbraid  # noqa: F401  (the compiled extension loads)
from mpi4py import MPI
print(f"torchbraid {metadata.version('torchbraid')}, torch {torch.__version__}, "
      f"numpy {numpy.__version__}, mpi4py {mpi4py.__version__}, Cython {Cython.__version__}, "
      f"{MPI.Get_library_version().splitlines()[0].strip()}")
PYEOF
echo "torchbraid venv ready: $VENV (bench_torch.py --torchbraid finds it: BRAIDPY_TORCHBRAID_VENV)"
