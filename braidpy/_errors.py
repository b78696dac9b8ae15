"""Exceptions raised by braidpy."""

__all__ = ["BraidError", "DivergenceError"]


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
