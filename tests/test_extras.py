"""Optional dependencies (braidpy._extras): the extras in pyproject.toml, lazy imports, and
serial runs that never touch MPI.

The subprocess tests hide optional packages behind a ``sys.meta_path`` finder, as if they
were not installed, and run braidpy from this checkout.
"""

import ast
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from test_mpi import MPIEXEC

ROOT = Path(__file__).resolve().parents[1]

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def names(requirements):
    """Distribution names (lower case, extras kept: 'braidpy-mgrit[...]') of requirements."""
    return {re.split(r"[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def expand(extra, extras):
    """Every distribution an extra brings, following braidpy-mgrit[...] self-references."""
    out = set()
    for name in names(extras[extra]):
        m = re.fullmatch(r"braidpy-mgrit\[(.*)\]", name)
        if m:
            for inner in m.group(1).split(","):
                out |= expand(inner.strip(), extras)
        else:
            out.add(name)
    return out


# ------------------------------------------------------------------ pyproject.toml


def test_the_base_install_needs_only_numpy():
    assert names(project()["dependencies"]) == {"numpy"}


def test_extras_bring_what_their_features_need():
    extras = project()["optional-dependencies"]
    assert expand("mpi", extras) == {"mpi4py", "mpich"}
    assert expand("train", extras) == {"scikit-learn", "matplotlib", "tqdm"}
    assert expand("integrators", extras) == {"scipy"}
    assert "cupy-cuda13x" in expand("gpu", extras)  # CUDA 13, as braidpy._cuda
    assert "torch==2.13.0" in extras["torch"]
    everything = expand("all", extras)
    for extra in ("mpi", "train", "gpu", "torch", "array-api", "integrators"):
        assert expand(extra, extras) <= everything, extra
    # `pip install -e ".[test]"` is all a test run needs (README, .ci/run)
    test = expand("test", extras)
    assert expand("mpi", extras) | expand("train", extras) <= test
    assert {"pytest", "sphinx", "myst-parser", "build", "cmake", "scipy",
            "array-api-compat", "array-api-strict"} <= test
    assert "cupy-cuda13x" not in test
    assert "torch==2.13.0" in extras["torch"] and "torch" in test  # braidpy.torch's tests
    # cuDNN (found at run time by braidpy._cudnn) is pinned and too large for test or all
    assert "nvidia-cudnn-cu13==9.28.1.4" in extras["cudnn"]
    assert not ({"nvidia-cudnn-cu13"} & (test | everything))


def test_ci_runs_the_readme_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    petsc = ('PETSC_CONFIGURE_OPTIONS="--with-fc=0 --with-cxx=0 --with-x=0 --with-cuda=0" '
             'pip install "petsc4py==3.26.1"')
    install = (ROOT / "docs" / "install.md").read_text()
    for text in (readme, install):
        # the test extra, then petsc4py (built with the mpich wheel's mpicc), then pytest
        steps = ['BRAIDPY_CUDA=AUTO pip install -e ".[test]"\n', "apt-get install liblapack-dev",
                 petsc, "python -m pytest"]
        places = [text.find(step) for step in steps]
        assert -1 not in places and places == sorted(places), (steps, places)
    steps = ['BRAIDPY_CUDA=AUTO python -m pip install -e ".[test]"\n',
             "apt-get install -y -qq liblapack-dev", petsc.replace(" pip", " python -m pip"), "python -m pytest"]
    places = [ci.find(step) for step in steps]
    assert -1 not in places and places == sorted(places), (steps, places)
    assert 'pip install -e ".[mpi,train]" && mpiexec -n 4 braidpy train peaks' in readme


def test_scipy_is_used_only_by_the_integrators_and_problems():
    """SciPy (the integrators extra) serves braidpy.integrators' implicit methods and the
    ready problems of braidpy.problems only."""
    only = (ROOT / "braidpy" / "integrators", ROOT / "braidpy" / "problems")
    for path in (ROOT / "braidpy").rglob("*.py"):
        if not any(o in path.parents for o in only) and path.name != "_extras.py":
            assert "scipy" not in path.read_text(), path


def module_level_imports(path):
    """Top-level modules imported at module level (outside functions and TYPE_CHECKING)."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, True)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            elif not in_function and isinstance(child, ast.Import):
                found.extend([(child.lineno, a.name.split(".")[0]) for a in child.names])
            elif not in_function and isinstance(child, ast.ImportFrom) and child.level == 0:
                found.append((child.lineno, child.module.split(".")[0]))
            else:
                visit(child, in_function)

    visit(ast.parse(path.read_text()), False)
    return found


def test_optional_packages_are_imported_lazily():
    allowed = set(sys.stdlib_module_names) | {"numpy", "braidpy"}
    # braidpy.torch is the torch extra itself; nothing outside it may import torch
    # (test_import_braidpy_never_imports_torch checks that nothing imports it).
    torch_only = ROOT / "braidpy" / "torch"
    eager = [f"{path.relative_to(ROOT)}:{line}: {module}"
             for path in sorted((ROOT / "braidpy").rglob("*.py"))
             for line, module in module_level_imports(path) if module not in allowed
             and not (module == "torch" and torch_only in path.parents)]
    assert not eager, "import these inside the functions that need them:\n" + "\n".join(eager)


# ------------------------------------------------------------------ without the extras

BLOCKER = """
import sys

class _NotInstalled:
    '''Pretends the packages in HIDDEN are not installed.'''
    HIDDEN = {hidden!r}

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
"""


def run_hidden(code, hidden, env=None, launcher=(), timeout=120):
    """Run ``code`` with the packages ``hidden`` made unimportable; (returncode, output)."""
    script = BLOCKER.format(hidden=set(hidden)) + textwrap.dedent(code)
    environ = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="error", **(env or {}))
    for name in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        if env is None or name not in env:
            environ.pop(name, None)
    proc = subprocess.run([*launcher, sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=timeout, env=environ, cwd=tempfile.gettempdir())
    return proc.returncode, proc.stdout + proc.stderr


SERIAL_SOLVE = """
import numpy as np
import braidpy
from braidpy.parallel import world

class Decay(braidpy.App):
    def init(self, t):
        return np.ones(1) if t == self.tstart else np.zeros(1)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)

assert world() is None
result = braidpy.solve(Decay(), tstart=0.0, tstop=5.0, ntime=256, cfactor=4, abs_tol=1e-10,
                       comm=world())
assert result.converged and abs(result.final[0] - (1 + 5 / 256) ** -256) < 1e-9
g = braidpy.GradientSolver  # the adjoint package imports without MPI too
hidden = sorted(m for m in sys.modules if m.split(".")[0] in _NotInstalled.HIDDEN)
assert not hidden, hidden
print("serial ok", result.iterations)
"""


def test_serial_runs_never_touch_mpi():
    rc, out = run_hidden(SERIAL_SOLVE, {"mpi4py", "mpich"})
    assert rc == 0, out
    assert "serial ok" in out


def test_serial_runs_need_no_optional_package():
    rc, out = run_hidden(SERIAL_SOLVE, {"mpi4py", "mpich", "sklearn", "matplotlib", "tqdm",
                                        "array_api_compat", "array_api_strict", "scipy"})
    assert rc == 0, out


def test_comm_without_mpi4py_names_the_mpi_extra():
    rc, out = run_hidden("""
        import numpy as np
        import pytest
        import braidpy
        from braidpy.parallel import rank_size

        class TwoRanks:
            '''What a communicator of 2 ranks answers, without mpi4py behind it.'''
            def Get_rank(self):
                return 0

            def Get_size(self):
                return 2

        class Decay(braidpy.App):
            def init(self, t):
                return np.ones(1)

            def step(self, u, t0, t1, status):
                u /= 1.0 + (t1 - t0)

        with pytest.raises(ImportError, match=r"pip install 'mpi4py.*\\[mpi\\] extra") as info:
            braidpy.solve(Decay(), 0.0, 1.0, 16, comm=TwoRanks())
        assert "mpi4py" in str(info.value)
        with pytest.raises(TypeError, match=r"\\[mpi\\] extra"):
            rank_size("COMM_WORLD")
        print("messages ok")
    """, {"mpi4py"})
    assert rc == 0, out
    assert "messages ok" in out


# One write per line: under mpiexec both ranks share the pipe, and print() writes the
# text and the newline separately, so two ranks' lines could run together.
WORLD = """
import sys
from braidpy.parallel import world
try:
    world()
except ImportError as err:
    sys.stdout.write(f"ImportError: {err}\\n")
else:
    sys.stdout.write("no error\\n")
sys.stdout.flush()
"""


def test_world_under_a_launcher_without_mpi4py_names_the_mpi_extra():
    # the environment mpiexec gives its processes, without mpiexec
    rc, out = run_hidden(WORLD, {"mpi4py"}, env={"PMI_SIZE": "4", "PMI_RANK": "0"})
    assert rc == 0, out
    assert "ImportError: this process is one of 4 that mpiexec started" in out
    assert "pip install 'mpi4py" in out and "[mpi] extra" in out, out
    # one process alone is a serial run
    rc, out = run_hidden(WORLD, {"mpi4py"}, env={"PMI_SIZE": "1"})
    assert (rc, out.strip()) == (0, "no error")


def test_world_under_mpiexec_without_mpi4py_names_the_mpi_extra():
    rc, out = run_hidden(WORLD, {"mpi4py"}, launcher=(MPIEXEC, "-n", "2"), timeout=60)
    assert rc == 0, out
    assert out.count("ImportError: this process is one of 2") == 2, out
    assert out.count("[mpi] extra") == 2, out


def test_training_and_plots_without_their_packages_name_the_train_extra():
    rc, out = run_hidden("""
        import numpy as np
        import pytest
        from braidpy import data, plotting
        from braidpy.train.plots import plot_history

        train = r"pip install 'scikit-learn.*\\[train\\] extra"
        with pytest.raises(ImportError, match="needs scikit-learn.*" + train):
            data.digits()
        with pytest.raises(ImportError, match="needs matplotlib.*" + train):
            plotting.plot_residuals([[1.0, 0.1]], "residuals.png")
        with pytest.raises(ImportError, match=r"matplotlib.*\\[train\\] extra"):
            plot_history([{"iteration": 1, "loss": 1.0}], ".")
        print("train messages ok")
    """, {"sklearn", "matplotlib"})
    assert rc == 0, out
    assert "train messages ok" in out


def test_array_api_arrays_without_array_api_compat_name_the_extra():
    rc, out = run_hidden("""
        import numpy as np
        import pytest
        from braidpy.backends import backend_for

        class Tensor:
            '''An array of some other library (it speaks DLPack).'''
            def __dlpack__(self, stream=None):
                raise NotImplementedError

        with pytest.raises(ImportError, match=r"array-api-compat.*\\[array-api\\] extra"):
            backend_for(Tensor(), "clone")
        with pytest.raises(TypeError, match="need an array"):  # not an array at all
            backend_for([1.0], "clone")
        assert backend_for(np.zeros(2)).name == "numpy"
        print("array messages ok")
    """, {"array_api_compat"})
    assert rc == 0, out
    assert "array messages ok" in out


def test_import_braidpy_never_imports_torch():
    rc, out = run_hidden("""
        import sys
        import braidpy, braidpy.adjoint, braidpy.backends, braidpy.nn, braidpy.parallel
        import braidpy.train, braidpy.data, braidpy.testing, braidpy.backends.torch
        import numpy as np
        braidpy.backends.backend_for(np.zeros(2))
        assert "torch" not in sys.modules, "torch was imported"
        print("no torch")
    """, set())
    assert rc == 0, out
    assert "no torch" in out


def test_braidpy_torch_without_torch_names_the_torch_extra():
    rc, out = run_hidden("""
        import pytest
        with pytest.raises(ImportError,
                           match=r"braidpy.torch needs torch.*\\[torch\\] extra"):
            import braidpy.torch
        print("torch message ok")
    """, {"torch"})
    assert rc == 0, out
    assert "torch message ok" in out


def _import_copy(tmp_path, checkout):
    """``import braidpy`` in a fresh interpreter from a copy of this package folder without
    its compiled core, as a wheel user running a script from a source checkout does (no
    site-packages .pth files, so no editable install can supply the core)."""
    import shutil

    import numpy

    shutil.copytree(ROOT / "braidpy", tmp_path / "braidpy",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    if checkout:
        (tmp_path / "csrc").mkdir()
    site = str(Path(numpy.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), site]))
    return subprocess.run([sys.executable, "-S", "-c", "import braidpy"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)


def test_missing_core_in_a_source_checkout_names_the_checkout(tmp_path):
    out = _import_copy(tmp_path, checkout=True)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: braidpy's compiled core (braidpy._core) is not in"), last
    assert f"source checkout {tmp_path}" in last and "Run from another directory" in last, last


def test_missing_core_outside_a_checkout_says_reinstall(tmp_path):
    out = _import_copy(tmp_path, checkout=False)
    last = out.stderr.strip().splitlines()[-1]
    assert "installation is incomplete; reinstall braidpy-mgrit" in last, last


def test_braidpy_petsc_without_petsc4py_names_what_to_install():
    code = """
    import braidpy.petsc as bp   # imports without petsc4py; making an app needs it
    try:
        bp.VecApp(None)
    except ImportError as err:
        print("refused:", err)
    """
    rc, out = run_hidden(code, {"petsc4py"})
    assert rc == 0, out
    assert "refused: braidpy.petsc needs petsc4py, which is not installed" in out, out
    assert "liblapack-dev" in out and "pip install 'petsc4py>=3.20'" in out, out
    assert "install the mpi extra first" in out, out
