"""Small apps shared by the tests and the MPI driver."""

import math

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import braidpy


class Decay(braidpy.App):
    """u' = lam*u, backward Euler; guess `guess` away from t0."""

    def __init__(self, lam=-1.0, guess=0.3, u0=1.0):
        self.lam, self.guess, self.u0 = lam, guess, u0

    def init(self, t):
        return np.array([self.u0 if t == self.tstart else self.guess])

    def step(self, u, t0, t1, status):
        u /= 1.0 - self.lam * (t1 - t0)


class Heat(braidpy.App):
    """1D heat equation on [0, pi], implicit Euler, u = 0 on the boundary."""

    def __init__(self, nx=33):
        self.nx = nx
        self.x = np.linspace(0.0, math.pi, nx)
        self.dx = self.x[1] - self.x[0]
        self._solvers = {}

    def _solver(self, dt):
        if dt not in self._solvers:
            n = self.nx - 2
            c = dt / self.dx**2
            A = sp.diags([-c * np.ones(n - 1), (1 + 2 * c) * np.ones(n), -c * np.ones(n - 1)],
                         [-1, 0, 1], format="csc")
            self._solvers[dt] = spla.factorized(A)
        return self._solvers[dt]

    def init(self, t):
        if t == self.tstart:
            return np.sin(self.x) + 0.5 * np.sin(3 * self.x)
        return np.zeros(self.nx)

    def step(self, u, t0, t1, status):
        u[1:-1] = self._solver(t1 - t0)(u[1:-1])


class Logistic(braidpy.App):
    """Nonlinear system u' = u(1-u) - 0.1*v, v' = 0.5*u - v, forward Euler."""

    def init(self, t):
        return np.array([0.1, 0.2]) if t == self.tstart else np.array([0.5, 0.5])

    def step(self, u, t0, t1, status):
        dt = t1 - t0
        a, b = u
        u[0] = a + dt * (a * (1 - a) - 0.1 * b)
        u[1] = b + dt * (0.5 * a - b)


class Box:
    """An opaque vector type (not an array)."""

    def __init__(self, values):
        self.values = list(values)


class OpaqueDecay(braidpy.App):
    """Decay on an opaque vector type: every vector callback overridden."""

    def init(self, t):
        return Box([1.0, 2.0] if t == self.tstart else [0.0, 0.0])

    def step(self, u, t0, t1, status):
        u.values = [v / (1.0 + (t1 - t0)) for v in u.values]

    def clone(self, u):
        return Box(u.values)

    def sum(self, a, x, b, y):
        y.values = [a * xv + b * yv for xv, yv in zip(x.values, y.values)]

    def norm(self, u):
        return math.sqrt(sum(v * v for v in u.values))

    def bufpack(self, u):
        return np.array(u.values).tobytes()

    def bufunpack(self, buf):
        return Box(np.frombuffer(buf, dtype=np.float64).tolist())


def serial_trajectory(app, tstart, tstop, ntime):
    """Plain sequential stepping on braidpy's fine grid (values at every point)."""
    app.tstart, app.tstop, app.ntime = tstart, tstop, ntime
    t = tstart + (np.arange(ntime + 1) / ntime) * (tstop - tstart)
    u = app.init(t[0])
    out = [app.clone(u)]
    for i in range(1, ntime + 1):
        r = app.step(u, t[i - 1], t[i], None)
        if r is not None:
            u = r
        out.append(app.clone(u))
    return out
