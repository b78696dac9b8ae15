"""The benchmark problems as braidpy apps (vectors are NumPy arrays, default vector ops)."""

from __future__ import annotations

import numpy as np
from _problems import HeatOperator

import braidpy

__all__ = ["Dahlquist", "Heat"]


class Dahlquist(braidpy.App):
    """u' = -u, backward Euler, in place: u <- u / (1 + dt); u(tstart) = 1."""

    def init(self, t):
        return np.ones(1) if t == self.tstart else np.zeros(1)

    def step(self, u, t0, t1, status):
        u /= 1.0 + (t1 - t0)


class Heat(braidpy.App):
    """1D heat equation, implicit Euler through a cached LU factor per dt."""

    def __init__(self, op: HeatOperator):
        self.op = op

    def init(self, t):
        return self.op.initial() if t == self.tstart else np.zeros(self.op.nx)

    def step(self, u, t0, t1, status):
        u[:] = self.op.solve(u, t1 - t0)
