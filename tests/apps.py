"""Small apps shared by the tests and the MPI driver."""

import math

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import braidpy
from braidpy.nn import (dense_adjoint, dense_adjoint_batched, dense_forward,
                        dense_forward_batched, dense_gradient, dense_gradient_batched)


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
    from braidpy.adjoint import AdjointStatus

    for i in range(1, ntime + 1):
        status = AdjointStatus(t0=t[i - 1], t1=t[i], t=t[i - 1], level=0, index=i - 1,
                               fine_index=i - 1, iteration=0, done=True, phase="final")
        r = app.step(u, t[i - 1], t[i], status)
        if r is not None:
            u = r
        out.append(app.clone(u))
    return out


# ---------------------------------------------------------------- adjoint apps


class DecayRate(braidpy.App):
    """u' = -k u (backward Euler), parameter k; J = u_N^2/2 + sum_i dt_i*u_i^2/2 (optional)."""

    def __init__(self, k=1.3, running=False):
        self.k = k
        if running:
            self.running_objective = self._running_objective
            self.running_gradient = self._running_gradient

    def init(self, t):
        return np.array([2.0]) if t == self.tstart else np.array([0.5])

    def step(self, u, t0, t1, status):
        u /= 1.0 + self.k * (t1 - t0)

    def step_adjoint(self, w, u, t0, t1, status):
        w /= 1.0 + self.k * (t1 - t0)

    def step_gradient(self, w, u, t0, t1, status):
        dt = t1 - t0
        return -dt * u / (1.0 + self.k * dt) ** 2 * w

    def terminal_objective(self, u):
        return 0.5 * float(u[0] ** 2)

    def terminal_gradient(self, u):
        return u.copy()

    def _running_objective(self, u, t, status):
        return 0.05 * float(u[0] ** 2)

    def _running_gradient(self, u, t, status):
        return 0.1 * u


class HeatControl(Heat):
    """Heat equation with a time-dependent control c_n: u_{n+1} = S(u_n + dt*c_n*b),
    S = (I - dt*Lap)^-1; J = |u_N - target|^2/2 + sum_i |u_i|^2 * 1e-3."""

    def __init__(self, nx, controls):
        super().__init__(nx)
        self.controls = np.asarray(controls, dtype=float)
        self.b = np.exp(-20 * (self.x - 1.0) ** 2)
        self.target = 0.3 * np.sin(2 * self.x)

    def _control(self, status):
        return self.controls[status.fine_index]

    def step(self, u, t0, t1, status):
        dt = t1 - t0
        u[1:-1] = self._solver(dt)(u[1:-1] + dt * self._control(status) * self.b[1:-1])

    def step_adjoint(self, w, u, t0, t1, status):
        w[1:-1] = self._solver(t1 - t0)(w[1:-1])  # S is symmetric
        w[0] = w[-1] = 0.0

    def step_gradient(self, w, u, t0, t1, status):
        dt = t1 - t0
        return dt * float(self.b[1:-1] @ self._solver(dt)(w[1:-1]))

    def terminal_objective(self, u):
        return 0.5 * float(np.sum((u - self.target) ** 2))

    def terminal_gradient(self, u):
        return u - self.target

    def running_objective(self, u, t, status):
        return 1e-3 * float(u @ u)

    def running_gradient(self, u, t, status):
        return 2e-3 * u


class LogisticParam(Logistic):
    """Logistic system with parameter p (the coupling), forward Euler; J = |u_N|^2/2."""

    def __init__(self, p=0.1):
        self.p = p

    def step(self, u, t0, t1, status):
        dt = t1 - t0
        a, b = u
        u[0] = a + dt * (a * (1 - a) - self.p * b)
        u[1] = b + dt * (0.5 * a - b)

    def step_adjoint(self, w, u, t0, t1, status):
        dt = t1 - t0
        a = u[0]
        wa, wb = w
        w[0] = (1 + dt * (1 - 2 * a)) * wa + 0.5 * dt * wb
        w[1] = -dt * self.p * wa + (1 - dt) * wb

    def step_gradient(self, w, u, t0, t1, status):
        return -(t1 - t0) * u[1] * w[0]

    def terminal_objective(self, u):
        return 0.5 * float(u @ u)

    def terminal_gradient(self, u):
        return u.copy()


def serial_gradient(app, tstart, tstop, ntime):
    """Plain forward sweep and backward sweep, same operations as braidpy's adjoint.

    Returns (objective, {n: gradient of step n}, w_0)."""
    from braidpy.adjoint import AdjointStatus

    traj = serial_trajectory(app, tstart, tstop, ntime)
    t = tstart + (np.arange(ntime + 1) / ntime) * (tstop - tstart)
    running = callable(getattr(app, "running_objective", None))

    def st(n):
        return AdjointStatus(t0=t[n], t1=t[min(n + 1, ntime)], t=t[n], level=0, index=n,
                             fine_index=n, iteration=0, done=True, phase="final")

    J = 0.0
    if running:
        J = sum(float(app.running_objective(traj[i], t[i], st(i))) for i in range(ntime + 1))
    J += float(app.terminal_objective(traj[ntime]))

    def add_running(w, n):
        if running:
            g = app.running_gradient(traj[n], t[n], st(n))
            if g is not None:
                app.sum(1.0, g, 1.0, w)
        return w

    w = add_running(app.clone(app.terminal_gradient(traj[ntime])), ntime)
    grads = {}
    for n in range(ntime - 1, -1, -1):
        g = app.step_gradient(w, traj[n], t[n], t[n + 1], st(n))
        if g is not None:
            grads[n] = g
        r = app.step_adjoint(w, traj[n], t[n], t[n + 1], st(n))
        if r is not None and r is not w:
            w = r
        w = add_running(w, n)
    return J, grads, w


# ---------------------------------------------------------------- batched apps


class BatchedDecay(Decay):
    """Decay with a stacked kernel (bitwise equal to step row by row)."""

    def step_stacked(self, U, t0s, t1s, status):
        U /= (1.0 - self.lam * (t1s - t0s))[:, None]


class BatchedDecayInto(BatchedDecay):
    """BatchedDecay with the out-of-place hook too (the same division, into out)."""

    into_calls = 0
    read_in_place = 0  # calls whose U was a read-only view of the core's states

    def step_stacked_into(self, U, out, t0s, t1s, status):
        assert not np.may_share_memory(U, out)  # out: fresh memory
        self.into_calls += 1
        self.read_in_place += not U.flags.writeable
        np.divide(U, (1.0 - self.lam * (t1s - t0s))[:, None], out=out)


class BatchedHeat(Heat):
    """Heat with a stacked kernel that solves row by row (one factor per dt)."""

    def step_stacked(self, U, t0s, t1s, status):
        for k in range(U.shape[0]):
            U[k, 1:-1] = self._solver(t1s[k] - t0s[k])(U[k, 1:-1])


class BatchedLogistic(Logistic):
    """Logistic with a vectorized kernel that returns a new stacked array."""

    def step_stacked(self, U, t0s, t1s, status):
        dt = t1s - t0s
        a, b = U[:, 0], U[:, 1]
        out = np.empty_like(U)
        out[:, 0] = a + dt * (a * (1 - a) - 0.1 * b)
        out[:, 1] = b + dt * (0.5 * a - b)
        return out


class BatchedOpaqueDecay(OpaqueDecay):
    """Opaque vectors with their own step_batch returning new states (list path)."""

    def step_batch(self, us, t0s, t1s, status):
        assert isinstance(us, list) and len(us) == len(t0s) == status.batch_size
        return [Box([v / (1.0 + (t1 - t0)) for v in u.values])
                for u, t0, t1 in zip(us, t0s.tolist(), t1s.tolist())]


class DenseResNet(braidpy.App):
    """u <- u + h tanh(u K_n^T + b_n), state (batch, width), own weights per layer
    (a coarse step from t_n uses layer n's); J = |u_N - y|^2 / 2. Batched forward,
    adjoint and gradient through braidpy.nn's dense kernels."""

    def __init__(self, ntime, width=4, batch=2, seed=20240917, batched=True):
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((width, width)) / np.sqrt(width)
        self.K = (1.5 * (a - a.T) - 0.1 * np.eye(width)
                  + 0.5 * rng.standard_normal((ntime, width, width)) / np.sqrt(width))
        self.b = 0.1 * rng.standard_normal((ntime, width))
        self.u0 = rng.standard_normal((batch, width))
        self.target = rng.standard_normal((batch, width))
        if not batched:  # same app without the batched hooks
            self.step_stacked = None
            self.step_adjoint_batch = None
            self.step_gradient_batch = None

    def init(self, t):
        return self.u0.copy() if t == self.tstart else np.zeros_like(self.u0)

    def step(self, u, t0, t1, status):
        n = status.fine_index
        return dense_forward(u, self.K[n], self.b[n], t1 - t0, "tanh")

    def step_stacked(self, U, t0s, t1s, status):
        n = status.fine_indices
        return dense_forward_batched(U, self.K[n], self.b[n], t1s - t0s, "tanh")

    def step_adjoint(self, w, u, t0, t1, status):
        n = status.fine_index
        return dense_adjoint(w, u, self.K[n], self.b[n], t1 - t0, "tanh")

    def step_adjoint_batch(self, W, U, t0s, t1s, status):
        n = status.fine_indices
        return dense_adjoint_batched(W, U, self.K[n], self.b[n], t1s - t0s, "tanh")

    def step_gradient(self, w, u, t0, t1, status):
        n = status.fine_index
        return dense_gradient(w, u, self.K[n], self.b[n], t1 - t0, "tanh")

    def step_gradient_batch(self, W, U, t0s, t1s, status):
        n = status.fine_indices
        dK, db = dense_gradient_batched(W, U, self.K[n], self.b[n], t1s - t0s, "tanh")
        return list(zip(dK, db))

    def terminal_objective(self, u):
        return 0.5 * float(np.sum((u - self.target) ** 2))

    def terminal_gradient(self, u):
        return u - self.target


class DenseResNetInto(DenseResNet):
    """DenseResNet with the out-of-place hooks: forward and adjoint written into out."""

    into_calls = 0

    def step_stacked_into(self, U, out, t0s, t1s, status):
        self.into_calls += 1
        n = status.fine_indices
        dense_forward_batched(U, self.K[n], self.b[n], t1s - t0s, "tanh", out=out)

    def step_adjoint_batch_into(self, W, U, out, t0s, t1s, status):
        self.into_calls += 1
        n = status.fine_indices
        dense_adjoint_batched(W, U, self.K[n], self.b[n], t1s - t0s, "tanh", out=out)


class RunningResNet(DenseResNet):
    """DenseResNet with a running term J += 0.01 sum_i |u_i|^2."""

    def running_objective(self, u, t, status):
        return 0.01 * float(np.sum(u * u))

    def running_gradient(self, u, t, status):
        return 0.02 * u


class RunningResNetInto(RunningResNet, DenseResNetInto):
    """RunningResNet with the out-of-place hooks (running terms added to out's rows)."""
