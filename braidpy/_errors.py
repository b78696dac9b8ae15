"""Exceptions raised by braidpy, and how their messages name ranks and callbacks."""

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

__all__ = ["BraidError", "ConvergenceError", "CudaError", "CudnnError", "DivergenceError",
           "ErrorLabels", "NoGPUError", "RankMismatchError"]


class BraidError(RuntimeError):
    """A solve stopped because of a failure (here or on another rank)."""


class DivergenceError(BraidError):
    """The residual norm became non-finite.

    Attributes
    ----------
    iteration : int
        Iteration whose residual was not finite.
    level : int
        Grid level where it was measured (the fine grid, 0).
    value : float
        The offending norm (nan or inf).
    """

    def __init__(self, iteration: int, level: int, value: float):
        super().__init__(
            f"MGRIT diverged: residual norm is {value} at iteration {iteration}, level {level}"
        )
        self.iteration = iteration
        self.level = level
        self.value = value


class ConvergenceError(BraidError):
    """A solve with ``require_convergence=True`` stopped at ``max_iter`` without meeting
    its tolerance.

    Attributes
    ----------
    iterations : int
    residual : float or None
        The last residual norm (None when none was computed).
    tolerance : str
        The halting test that was not met, e.g. "abs_tol=1e-10".
    """

    def __init__(self, iterations: int, residual: Optional[float], tolerance: str):
        last = "no residual computed" if residual is None else f"last residual {residual:.6e}"
        super().__init__(f"MGRIT did not converge: {iterations} iterations (max_iter) and "
                         f"{tolerance} not met ({last})")
        self.iterations = iterations
        self.residual = residual
        self.tolerance = tolerance


class RankMismatchError(ValueError):
    """The ranks of one communicator were given different problems (time grid,
    options, layer layout...): raised on every rank, before any work, by
    :func:`braidpy.parallel.fingerprint.same_everywhere`.

    Attributes
    ----------
    field : str
        The first field that differs ("tstop", "cfactor"...).
    values : tuple of str
        How that field reads on each rank, in rank order ("(not given)" where a rank
        has no such field).
    """

    def __init__(self, message: str, field: str = "", values: Tuple[str, ...] = ()):
        super().__init__(message)
        self.field = field
        self.values = tuple(values)


class CudaError(BraidError):
    """A CUDA call of braidpy's GPU code failed.

    Attributes
    ----------
    code : int or None
        The ``cudaError_t`` code (None when no CUDA call was made).
    """

    def __init__(self, message: str, code: Optional[int] = None):
        super().__init__(message)
        self.code = code


class NoGPUError(CudaError):
    """GPU code was asked for and no GPU can run it: braidpy._cuda was not compiled
    (``code`` None), there is no CUDA driver (``code`` 35, cudaErrorInsufficientDriver)
    or no device (``code`` 100, cudaErrorNoDevice). :func:`braidpy.cuda_info` shows
    what was found.
    """


class CudnnError(CudaError):
    """braidpy's cuDNN convolutions could not run: cuDNN could not be loaded (``code``
    None; the message lists every library tried, see :func:`braidpy.cuda_info`), or a
    cuDNN call failed (``code`` is its ``cudnnStatus_t``, the message cuDNN's text).
    """


@dataclass(frozen=True)
class ErrorLabels:
    """How a :class:`braidpy.Core`'s errors name ranks and callbacks.

    For apps that wrap other apps (``braidpy.adjoint`` runs the user's adjoint
    callbacks inside its own ``step``/``init``/``access``, on a reversed communicator).

    Parameters
    ----------
    ranks : tuple of int, optional
        The number each rank of the Core's communicator is known by (default: its
        rank in that communicator).
    callbacks : dict, optional
        The name to report for a failing core callback (``{"step": "step_adjoint"}``).
    """

    ranks: Optional[Tuple[int, ...]] = None
    callbacks: Mapping[str, str] = field(default_factory=dict)
