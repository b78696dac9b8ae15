"""braidpy: parallel-in-time (MGRIT) solves in the style of XBraid."""

from ._app import App
from ._core import Status
from ._errors import BraidError, DivergenceError
from ._options import Options
from ._result import Result
from ._solver import Core, solve

__version__ = "0.1.0"

__all__ = [
    "App",
    "BraidError",
    "Core",
    "DivergenceError",
    "Options",
    "Result",
    "Status",
    "solve",
    "__version__",
]
