"""Problems shared by the braidpy and PyMGRIT sides (NumPy and SciPy only: the PyMGRIT
virtualenv imports this module). Dahlquist: u' = -u, u(0) = 1, backward Euler. Heat 1D:
u_t = a u_xx on (0, 1), u = 0 at both ends, nx interior points, implicit Euler."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

DAHLQUIST_TSTART, DAHLQUIST_TSTOP = 0.0, 5.0
HEAT_TSTART, HEAT_TSTOP = 0.0, 2.0
HEAT_DIFFUSIVITY = 0.1


class HeatOperator:
    """Implicit Euler for 1D heat; LU factors cached by dt as a multiple of ``dt_fine``
    (1, cf, cf^2, ...), so rounding differences between equal steps never miss."""

    def __init__(self, nx: int, dt_fine: float, diffusivity: float = HEAT_DIFFUSIVITY):
        h = 1.0 / (nx + 1)
        self.nx, self.dt_fine = nx, dt_fine
        self.x = np.linspace(h, 1.0 - h, nx)
        self.laplacian = (diffusivity / h**2) * sp.diags(
            [1.0, -2.0, 1.0], [-1, 0, 1], shape=(nx, nx), format="csc")
        self.identity = sp.identity(nx, format="csc")
        self._factors: dict = {}

    def initial(self) -> np.ndarray:
        """u(0): a smooth mode plus an oscillatory one."""
        return np.sin(np.pi * self.x) + 0.5 * np.sin(24.0 * np.pi * self.x)

    def solve(self, u: np.ndarray, dt: float) -> np.ndarray:
        """A new array (I - dt A)^{-1} u."""
        key = round(dt / self.dt_fine)
        if key not in self._factors:
            self._factors[key] = splu((self.identity - dt * self.laplacian).tocsc())
        return self._factors[key].solve(u)


def count_levels(nsteps: int, cfactor: int, max_levels: int, min_coarse: int = 2) -> int:
    """Levels braidpy (XBraid's rule) builds: coarsen while n // cf >= min_coarse."""
    levels, n = 1, nsteps
    while levels < max_levels and n > min_coarse and n // cfactor >= min_coarse:
        n //= cfactor
        levels += 1
    return levels
