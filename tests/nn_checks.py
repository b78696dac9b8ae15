"""Finite-difference helpers shared by the braidpy.nn layer tests."""

import numpy as np

from braidpy.nn import SMOOTH_RELU_EPS

FD_STEP = 1e-6
RTOL = 1e-7
# Where each activation's derivative jumps (None: no activation).
KINKS = {None: [], "tanh": [], "relu": [0.0],
         "smooth_relu": [-SMOOTH_RELU_EPS, SMOOTH_RELU_EPS]}


def fd_gradient(f, x: np.ndarray) -> np.ndarray:
    """Central finite differences of the scalar function f at x, entry by entry."""
    g = np.empty_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += FD_STEP
        xm[i] -= FD_STEP
        g[i] = (f(xp) - f(xm)) / (2 * FD_STEP)
    return g


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def min_kink_distance(z: np.ndarray, name) -> float:
    return min((float(np.min(np.abs(z - k))) for k in KINKS[name]), default=np.inf)


def bias_away_from_kinks(z_of_b, b: np.ndarray, name, margin: float = 1e-3) -> np.ndarray:
    """Shift the bias until no pre-activation lies within margin of a kink (for FD checks)."""
    for _ in range(50):
        if min_kink_distance(z_of_b(b), name) > margin:
            return b
        b = b + 0.0137  # deterministic nudge; the seed is fixed, this rarely loops
    raise AssertionError("could not keep the test data away from the kinks")
