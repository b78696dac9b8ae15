# Sourced by setup_pymgrit_env.sh and setup_torchbraid_env.sh: the other library's
# virtualenv, with the MPICH wheel version of braidpy's interpreter (one MPI for both sides).

# make_venv PYTHON VENV PACKAGES...: VENV from PYTHON unless it exists, then pip, mpi4py,
# the interpreter's MPICH wheel version (else the latest) and PACKAGES in it.
make_venv() {
  local mpich
  mpich="$("$1" - <<'PYEOF'
from importlib import metadata
try:
    print("mpich==" + metadata.version("mpich"))
except metadata.PackageNotFoundError:
    print("mpich")
PYEOF
)"
  if [[ ! -x "$2/bin/python" ]]; then
    mkdir -p "$(dirname "$2")"
    "$1" -m venv "$2"
  fi
  "$2/bin/python" -m pip install --quiet --upgrade pip
  "$2/bin/python" -m pip install --quiet "$mpich" mpi4py "${@:3}"
}
