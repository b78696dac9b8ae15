"""braidpy: parallel-in-time (MGRIT) solves in the style of XBraid."""

# First, before anything can start MPI: with more ranks than cores, MPICH's waiting ranks
# yield their cores instead of busy-polling (braidpy.parallel.comm).
from .parallel.comm import yield_when_oversubscribed as _yield_when_oversubscribed

_yield_when_oversubscribed()

from ._accuracy import spatial_accuracy
from ._delta import finite_difference_jvp
from ._app import App

try:
    from ._core import Status
except ModuleNotFoundError as _err:  # the compiled core is not beside this __init__.py
    if _err.name != f"{__name__}._core":
        raise
    from ._extras import missing_core_error

    raise missing_core_error(__file__) from _err
from ._errors import (BraidError, ConvergenceError, CudaError, CudnnError, DivergenceError,
                      ErrorLabels, NoGPUError, RankMismatchError)
from ._gpu import cuda_info
from ._options import Options
from ._result import Result
from ._solver import Core, solve
from . import adjoint
from .adjoint import Gradient, GradientSolver, gradient

__version__ = "0.1.0"

__all__ = [
    "App",
    "BraidError",
    "ConvergenceError",
    "Core",
    "CudaError",
    "CudnnError",
    "DivergenceError",
    "ErrorLabels",
    "Gradient",
    "GradientSolver",
    "NoGPUError",
    "Options",
    "RankMismatchError",
    "Result",
    "Status",
    "adjoint",
    "cuda_info",
    "finite_difference_jvp",
    "gradient",
    "solve",
    "spatial_accuracy",
    "__version__",
]
