# Sourced by setup_*_env.sh. make_venv PYTHON VENV PACKAGES...: VENV from PYTHON unless it
# exists, then pip, mpi4py, PYTHON's MPICH wheel version (one MPI for both sides), PACKAGES.
make_venv() {
  local mpich
  mpich="$("$1" -c "from importlib import metadata as m
v = {d.metadata['Name'].lower(): d.version for d in m.distributions()}.get('mpich')
print('mpich==' + v if v else 'mpich')")"
  [[ -x "$2/bin/python" ]] || { mkdir -p "$(dirname "$2")" && "$1" -m venv "$2"; }
  "$2/bin/python" -m pip install --quiet --upgrade pip
  "$2/bin/python" -m pip install --quiet "$mpich" mpi4py "${@:3}"
}
