"""Ready problems with their reference solutions, built on braidpy.integrators
(docs/problems.md): PyMGRIT 1.0's set, XBraid's Lorenz example and its
Kuramoto-Sivashinsky driver.

- :class:`Dahlquist`: ``u' = lambda u``, exact.
- :class:`Brusselator`, :class:`ArenstorfOrbit`, :class:`Lorenz`: nonlinear ODEs, with
  SciPy's ``solve_ivp`` at tight tolerance as the reference.
- :class:`Advection1D` (upwind, periodic), :class:`Heat1D`, :class:`Heat2D` (central
  differences, Dirichlet): the method of lines, exact or manufactured solutions.
- :class:`AllenCahn`: a shrinking circle, periodic, backward Euler with Newton.
- :class:`KuramotoSivashinsky`: chaotic, periodic, fourth-order differences and Lobatto
  IIIC with Newton, as XBraid's KS driver (and that driver step for step);
  :class:`KuramotoSivashinskySpectral`: the same, pseudo-spectral with ETDRK4.

Each has the parameters and default time grid of the library it comes from,
``app(method)``, an App for ``braidpy.solve``, ``solve(method, **options)`` on the
default grid, and ``reference(times)``. They need SciPy (the ``integrators`` extra).
"""

from __future__ import annotations

from ._base import Problem
from ._ks import KuramotoSivashinsky, KuramotoSivashinskySpectral
from ._odes import ArenstorfOrbit, Brusselator, Dahlquist, Lorenz
from ._pdes import Advection1D, AllenCahn, Heat1D, Heat2D

__all__ = ["Advection1D", "AllenCahn", "ArenstorfOrbit", "Brusselator", "Dahlquist", "Heat1D",
           "Heat2D", "KuramotoSivashinsky",
           "KuramotoSivashinskySpectral", "Lorenz", "Problem"]
