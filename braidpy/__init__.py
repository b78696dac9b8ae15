"""braidpy: parallel-in-time (MGRIT) solves in the style of XBraid."""

from ._app import App
from ._core import Status
from ._errors import BraidError, ConvergenceError, DivergenceError, ErrorLabels
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
    "DivergenceError",
    "ErrorLabels",
    "Gradient",
    "GradientSolver",
    "Options",
    "Result",
    "Status",
    "adjoint",
    "gradient",
    "solve",
    "__version__",
]
