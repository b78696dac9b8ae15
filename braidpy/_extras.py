"""Optional dependencies: imported when first needed, naming the extra that brings them.

The base install needs only NumPy. Everything else is an extra (see pyproject.toml):

================  ===================================================================
extra             brings
================  ===================================================================
``mpi``           mpi4py and the mpich wheel (runs on several ranks)
``train``         scikit-learn (the digits data), matplotlib (plots), tqdm (``braidpy train``)
``arrays``        array-api-compat (default vector operations on non-NumPy arrays)
``gpu``           CuPy for CUDA 12 (with ``arrays``)
``torch``         PyTorch (with ``arrays``)
``integrators``   SciPy (the implicit methods of ``braidpy.integrators``)
``petsc``         petsc4py, built from source on the ``mpi`` extra's MPI (``braidpy.petsc``)
``all``           all of the above
================  ===================================================================
"""

from __future__ import annotations

import importlib
import re
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import List

__all__ = ["require", "install_hint", "missing_core_error"]

#: braidpy's distribution name (pyproject.toml), whose extras bring the optional packages.
DISTRIBUTION = "braidpy-mgrit"

#: The distribution (what ``pip install`` takes) of each optional top-level module.
DISTRIBUTIONS = {
    "mpi4py": "mpi4py",
    "sklearn": "scikit-learn",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
    "array_api_compat": "array-api-compat",
    "cupy": "cupy-cuda13x",
    "torch": "torch",
    "scipy": "scipy",
    "petsc4py": "petsc4py",
}


def extra_requirements(extra: str) -> List[str]:
    """The requirements ``extra`` brings, from the installed distribution's metadata, with
    the extras it includes expanded (``examples`` includes ``mpi`` and ``train``); empty
    when braidpy-mgrit's metadata is not installed (a bare source folder on sys.path).
    """
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    out: List[str] = []
    pending, seen = [extra], set()
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        for line in declared:
            requirement, _, marker = line.partition(";")
            if not re.search(r"""extra\s*==\s*["']%s["']""" % re.escape(name), marker):
                continue
            requirement = requirement.strip()
            inner = re.fullmatch(re.escape(DISTRIBUTION) + r"\s*\[(.*)\]", requirement)
            if inner:
                pending.extend(e.strip() for e in inner.group(1).split(","))
            elif requirement.replace(" ", "") not in out:
                out.append(requirement.replace(" ", ""))
    return out


def install_hint(extra: str) -> str:
    """The command that installs what ``extra`` brings: the packages themselves (braidpy
    is installed from a source checkout, not from PyPI, so ``pip install
    'braidpy-mgrit[mpi]'`` would not find it).

    >>> install_hint("mpi")  # doctest: +SKIP
    "pip install 'mpi4py>=4.0' 'mpich>=4.1' (braidpy-mgrit's [mpi] extra)"
    >>> "[train] extra" in install_hint("train")
    True
    """
    requirements = extra_requirements(extra)
    if not requirements:
        return f"pip install -e '.[{extra}]' in braidpy's source folder"
    packages = " ".join(f"'{r}'" for r in requirements)
    return f"pip install {packages} ({DISTRIBUTION}'s [{extra}] extra)"


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module``; if it is missing, an ImportError saying that ``what`` needs it
    and which extra of braidpy brings it.

    Examples
    --------
    >>> require("json", "train", "this example").__name__
    'json'
    >>> require("braidpy_no_such_module", "train", "braidpy train's plots")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ImportError: braidpy train's plots needs braidpy_no_such_module, which is not installed; \
install it with: pip install ... (braidpy-mgrit's [train] extra)
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split(".")[0]
        if getattr(err, "name", None) not in (None, top, module):
            raise  # the package is there but one of *its* imports failed: show that
        dist = DISTRIBUTIONS.get(top, top)
        raise ImportError(
            f"{what} needs {dist}, which is not installed; install it with: "
            f"{install_hint(extra)}", name=top
        ) from err


def missing_core_error(init_file: str) -> ImportError:
    """The ImportError for a braidpy package folder without its compiled core
    (``braidpy._core``), saying why that happens and what to do.

    The common cause is a source checkout on ``sys.path`` (a script run from the
    repository's root) shadowing the installed package: Python imports the checkout's
    ``braidpy/``, where the core was never built.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "csrc").mkdir(); (root / "braidpy").mkdir()
    >>> print(missing_core_error(str(root / "braidpy" / "__init__.py")))  # doctest: +ELLIPSIS
    braidpy's compiled core (braidpy._core) is not in .../braidpy: Python imported braidpy from the source checkout ... rather than from an installed braidpy. ...
    """
    package = Path(init_file).resolve().parent
    checkout = package.parent
    if (checkout / "csrc").is_dir():
        return ImportError(
            f"braidpy's compiled core (braidpy._core) is not in {package}: Python imported "
            f"braidpy from the source checkout {checkout} (the current directory or "
            f"sys.path) rather than from an installed braidpy. Run from another directory, "
            f"or build the checkout itself: pip install -e {checkout} (or, in {checkout}, "
            f"python setup.py build_ext --inplace)", name="braidpy._core")
    return ImportError(
        f"braidpy's compiled core (braidpy._core) is missing from {package}: the "
        f"installation is incomplete; reinstall braidpy-mgrit (from a source checkout: "
        f"pip install -e .)", name="braidpy._core")
