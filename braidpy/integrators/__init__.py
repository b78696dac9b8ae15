"""Time integrators that are braidpy Apps: bring a right-hand side or an operator, get an
MGRIT-ready App with a batched step (docs/integrators.md).

- :class:`ExplicitRK`: ``u' = f(t, u)`` by an explicit Runge-Kutta method from a
  :class:`ButcherTableau` (forward Euler, Heun, SSP-RK3, RK4, and the embedded pairs
  Heun-Euler 2(1) and Bogacki-Shampine 3(2) with :meth:`ExplicitRK.error_estimate`).
- :class:`AdaptiveRK`: ``u' = f(t, u)`` by an embedded pair (Dormand-Prince 5(4),
  Bogacki-Shampine 3(2)) with step-size control inside every step, each row of a batch
  with its own substeps.
- :class:`ThetaMethod` (:class:`BackwardEuler`, :class:`CrankNicolson`) and
  :class:`SDIRK` (Alexander's L-stable SDIRK2 and SDIRK3): ``M u' = A u + g(t)`` with a
  SciPy sparse or dense ``A``, one LU factorization per step size, and one
  multi-right-hand-side solve per batched step (these need SciPy: the ``integrators``
  extra).
- :class:`NonlinearSDIRK` (:class:`NonlinearBackwardEuler`): ``u' = f(t, u)`` by SDIRK2,
  SDIRK3 or backward Euler, each stage solved by Newton's method with a user Jacobian
  (:class:`ConstantPlusDiagonal` for ``A + diag(d(t, u))``) or finite differences.
- :class:`PerLevel`: a different integrator on each MGRIT level.
"""

from __future__ import annotations

from ._adaptive import AdaptiveRK, StepSizeError
from ._explicit import ExplicitRK
from ._factors import FactorCache
from ._implicit import (SDIRK, BackwardEuler, CrankNicolson, LinearImplicit, ThetaMethod,
                        default_rhs_per_solve)
from ._initial import InitialValueApp
from ._levels import PerLevel
from ._linear import LinearSystem, SeparableForcing
from ._newton import ConstantPlusDiagonal, NewtonError, NonlinearBackwardEuler, NonlinearSDIRK
from ._tableau import (BACKWARD_EULER, BOGACKI_SHAMPINE, DORMAND_PRINCE, FORWARD_EULER, HEUN,
                       HEUN_EULER, RK4, SDIRK2, SDIRK3, SSPRK3, ButcherTableau, tableau)

__all__ = [
    "AdaptiveRK",
    "BACKWARD_EULER",
    "BOGACKI_SHAMPINE",
    "BackwardEuler",
    "ButcherTableau",
    "ConstantPlusDiagonal",
    "CrankNicolson",
    "DORMAND_PRINCE",
    "ExplicitRK",
    "FORWARD_EULER",
    "FactorCache",
    "HEUN",
    "HEUN_EULER",
    "InitialValueApp",
    "LinearImplicit",
    "LinearSystem",
    "NewtonError",
    "NonlinearBackwardEuler",
    "NonlinearSDIRK",
    "PerLevel",
    "RK4",
    "SDIRK",
    "SDIRK2",
    "SDIRK3",
    "SSPRK3",
    "SeparableForcing",
    "StepSizeError",
    "ThetaMethod",
    "default_rhs_per_solve",
    "tableau",
]
