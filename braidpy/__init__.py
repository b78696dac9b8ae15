"""braidpy: parallel-in-time (MGRIT) solves in the style of XBraid."""

from ._app import App
from ._core import Status
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
    "gradient",
    "solve",
    "__version__",
]
