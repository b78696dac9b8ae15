"""The benchmark problems as PyMGRIT applications (run in the PyMGRIT virtualenv).

Same steppers as _apps_braidpy.py: PyMGRIT's contract is functional (step
returns a new vector, vector arithmetic allocates), so the state is a NumPy
array wrapped in an immutable-by-convention Vector.
"""

from __future__ import annotations

import numpy as np
from _problems import HeatOperator
from pymgrit.core.application import Application
from pymgrit.core.vector import Vector

__all__ = ["ArrayVector", "Dahlquist", "Heat"]


class ArrayVector(Vector):
    """A PyMGRIT vector holding one NumPy array."""

    def __init__(self, values: np.ndarray):
        super().__init__()
        self.values = values

    def __add__(self, other):
        return ArrayVector(self.values + other.values)

    def __sub__(self, other):
        return ArrayVector(self.values - other.values)

    def __mul__(self, other):
        return ArrayVector(self.values * other)

    def norm(self):
        return np.linalg.norm(self.values)

    def clone(self):
        return ArrayVector(self.values.copy())

    def clone_zero(self):
        return ArrayVector(np.zeros_like(self.values))

    def clone_rand(self):
        return ArrayVector(np.random.default_rng().random(self.values.shape))

    def set_values(self, values):
        self.values = values

    def get_values(self):
        return self.values

    def pack(self):
        return self.values

    def unpack(self, values):
        self.values = values


class Dahlquist(Application):
    """u' = -u, backward Euler: u_stop = u_start / (1 + dt); u(t_start) = 1."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.vector_template = ArrayVector(np.zeros(1))
        self.vector_t_start = ArrayVector(np.ones(1))

    def step(self, u_start, t_start, t_stop):
        return ArrayVector(u_start.values / (1.0 + (t_stop - t_start)))


class Heat(Application):
    """1D heat equation, implicit Euler through a cached LU factor per dt."""

    def __init__(self, op: HeatOperator, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.op = op
        self.vector_template = ArrayVector(np.zeros(op.nx))
        self.vector_t_start = ArrayVector(op.initial())

    def step(self, u_start, t_start, t_stop):
        return ArrayVector(self.op.solve(u_start.values, t_stop - t_start))
