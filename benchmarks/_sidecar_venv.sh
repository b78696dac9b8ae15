# Shared by setup_pymgrit_env.sh and setup_torchbraid_env.sh (sourced, not run):
# the other library's virtualenv, with the same MPICH wheel version as braidpy's
# interpreter so that both sides of a benchmark run under one MPI.

# mpich_requirement PYTHON: "mpich==X" for the interpreter's MPICH wheel, else "mpich".
mpich_requirement() {
  local version
  version="$("$1" - <<'PYEOF'
from importlib import metadata
try:
    print(metadata.version("mpich"))
except metadata.PackageNotFoundError:
    print("")
PYEOF
)"
  if [[ -n "$version" ]]; then echo "mpich==$version"; else echo "mpich"; fi
}

# make_venv PYTHON VENV: create VENV from PYTHON unless it exists; upgrade its pip.
make_venv() {
  if [[ ! -x "$2/bin/python" ]]; then
    mkdir -p "$(dirname "$2")"
    "$1" -m venv "$2"
  fi
  "$2/bin/python" -m pip install --quiet --upgrade pip
}
