"""Exceptions raised by braidpy, and how their messages name ranks and callbacks."""

from dataclasses import dataclass, field
from typing import Mapping, Optional, Tuple

__all__ = ["BraidError", "DivergenceError", "ErrorLabels"]


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


@dataclass(frozen=True)
class ErrorLabels:
    """How a :class:`braidpy.Core`'s errors name ranks and callbacks.

    For apps that wrap other apps (``braidpy.adjoint`` runs the user's adjoint
    callbacks inside its own ``step``/``init``/``access``, on a reversed communicator):

    ranks : the number each rank of the Core's communicator is known by (default: its
        rank in that communicator).
    callbacks : the name to report for a failing core callback ({"step": "step_adjoint"}).
    """

    ranks: Optional[Tuple[int, ...]] = None
    callbacks: Mapping[str, str] = field(default_factory=dict)
