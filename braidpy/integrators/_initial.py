"""The initial value and the initial guess that every integrator App starts from."""

from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np

from .._app import App

__all__ = ["InitialValueApp"]

Guess = Union[str, Callable[[float], Any]]


def as_state(name: str, value: Any) -> np.ndarray:
    """``value`` as a new NumPy array of at least one axis (integers become float64)."""
    if callable(value) or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be an array of numbers, got {value!r}")
    try:
        arr = np.array(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an array of numbers, got {value!r}") from err
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float64)
    if arr.dtype.kind not in "fc":
        raise TypeError(f"{name} must be an array of real or complex numbers, got dtype "
                        f"{arr.dtype}")
    if arr.ndim == 0 or arr.size == 0:
        raise ValueError(f"{name} must have at least one axis and one entry, got shape "
                         f"{arr.shape}")
    return arr


class InitialValueApp(App):
    """An App whose ``init`` gives the initial value ``u0`` at ``tstart`` and a guess
    elsewhere.

    Parameters
    ----------
    u0 : array_like
        The initial value (copied; integers become float64).
    guess : {"u0", "zeros"} or callable, optional
        The initial guess at the other C-points: a copy of ``u0`` (default), zeros, or
        ``guess(t)``, an array of ``u0``'s shape.
    """

    def __init__(self, u0: Any, guess: Guess = "u0"):
        self.u0 = as_state("u0", u0)
        self.u0.setflags(write=False)
        if not (callable(guess) or guess in ("u0", "zeros")):
            raise ValueError(f"guess must be 'u0', 'zeros' or a callable guess(t), got "
                             f"{guess!r}")
        self.guess = guess

    @property
    def shape(self) -> tuple:
        """The shape of one state."""
        return tuple(self.u0.shape)

    def init(self, t: float) -> np.ndarray:
        """``u0`` at ``tstart``; elsewhere the guess (see ``guess``)."""
        if t == self.tstart or self.guess == "u0":
            return self.u0.copy()
        if self.guess == "zeros":
            return np.zeros_like(self.u0)
        g = np.array(self.guess(t), dtype=self.u0.dtype)  # type: ignore[operator]
        if g.shape != self.u0.shape:
            raise ValueError(f"guess({t!r}) has shape {g.shape}, but states have shape "
                             f"{self.u0.shape}")
        return g
