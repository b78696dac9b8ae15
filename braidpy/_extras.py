"""Optional dependencies: imported when first needed, naming the extra that brings them.

The base install needs only NumPy. Everything else is an extra (see pyproject.toml):

=========  ==========================================================================
extra      brings
=========  ==========================================================================
``mpi``    mpi4py and the mpich wheel (runs on several ranks)
``train``  scikit-learn (the digits data), matplotlib (plots), tqdm (``braidpy train``)
``arrays`` array-api-compat (default vector operations on non-NumPy arrays)
``gpu``    CuPy for CUDA 12 (with ``arrays``)
``torch``  PyTorch (with ``arrays``)
``all``    all of the above
=========  ==========================================================================
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require", "install_hint"]

#: The distribution (what ``pip install`` takes) of each optional top-level module.
DISTRIBUTIONS = {
    "mpi4py": "mpi4py",
    "sklearn": "scikit-learn",
    "matplotlib": "matplotlib",
    "tqdm": "tqdm",
    "array_api_compat": "array-api-compat",
    "cupy": "cupy-cuda13x",
    "torch": "torch",
}


def install_hint(extra: str) -> str:
    """The command that installs ``extra``.

    >>> install_hint("mpi")
    "pip install 'braidpy-mgrit[mpi]'"
    """
    return f"pip install 'braidpy-mgrit[{extra}]'"


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module``; if it is missing, an ImportError saying that ``what`` needs it
    and which extra of braidpy brings it.

    Examples
    --------
    >>> require("json", "train", "this example").__name__
    'json'
    >>> require("braidpy_no_such_module", "train", "braidpy train's plots")
    Traceback (most recent call last):
    ...
    ImportError: braidpy train's plots needs braidpy_no_such_module, which is not installed; \
install it with: pip install 'braidpy-mgrit[train]'
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
