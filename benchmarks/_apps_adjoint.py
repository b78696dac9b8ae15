"""bench_adjoint.py's apps: a width-8 ResNet with its own weights per step, and 1D heat
with a control per step and a running term; both store dJ/dtheta_n in place. Also the
serial gradient over the same callbacks (tests/apps.py's order)."""

from __future__ import annotations

import numpy as np

import braidpy
from _problems import HeatOperator

WIDTH = 8
RESNET_TSTOP = 2.0
HEAT_TSTOP = 1.0


class ResNetWeights:
    """Per-step weights, initial state and target of the ResNet problem."""

    def __init__(self, ntime: int, sigma: float = 0.5, seed: int = 20240611):
        rng = np.random.default_rng(seed + ntime)
        a = rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)
        kbar = 1.5 * (a - a.T) - 0.1 * np.eye(WIDTH)
        self.K = kbar + sigma * rng.standard_normal((ntime, WIDTH, WIDTH)) / np.sqrt(WIDTH)
        self.b = 0.3 * rng.standard_normal(WIDTH) + 0.1 * rng.standard_normal((ntime, WIDTH))
        self.u0 = rng.standard_normal(WIDTH)
        self.target = rng.standard_normal(WIDTH)

    def perturb(self, rng: np.random.Generator, scale: float = 1e-3) -> None:
        self.K += scale * rng.standard_normal(self.K.shape)
        self.b += scale * rng.standard_normal(self.b.shape)


class ResNet(braidpy.App):
    """u <- u + h tanh(K_n u + b_n); J = |u_N - y|^2 / 2; dJ/dK_n, dJ/db_n stored in place."""

    def __init__(self, weights: ResNetWeights):
        self.w = weights
        n = weights.K.shape[0]
        self.dK = np.zeros((n, WIDTH, WIDTH))
        self.db = np.zeros((n, WIDTH))

    def gradient(self) -> np.ndarray:
        return np.concatenate([self.dK.ravel(), self.db.ravel()])

    def init(self, t):
        return self.w.u0.copy() if t == self.tstart else np.zeros(WIDTH)

    def step(self, u, t0, t1, status):
        i = status.fine_index
        u += (t1 - t0) * np.tanh(self.w.K[i] @ u + self.w.b[i])

    def step_adjoint(self, w, u, t0, t1, status):
        i = status.fine_index
        K = self.w.K[i]
        s = np.tanh(K @ u + self.w.b[i])
        w += (t1 - t0) * ((1.0 - s * s) * w) @ K

    def step_gradient(self, w, u, t0, t1, status):
        i = status.fine_index
        s = np.tanh(self.w.K[i] @ u + self.w.b[i])
        sw = (t1 - t0) * (1.0 - s * s) * w
        np.multiply.outer(sw, u, out=self.dK[i])
        self.db[i] = sw

    def terminal_objective(self, u):
        d = u - self.w.target
        return 0.5 * float(d @ d)

    def terminal_gradient(self, u):
        return u - self.w.target


class HeatControlData:
    """Controls c_n (a smooth signal plus per-step noise) of the heat problem."""

    def __init__(self, ntime: int, nx: int, seed: int = 20240611):
        rng = np.random.default_rng(seed + ntime)
        t = np.arange(ntime) / ntime
        self.nx = nx
        self.c = np.sin(2 * np.pi * t) + 0.3 * rng.standard_normal(ntime)

    def perturb(self, rng: np.random.Generator, scale: float = 1e-3) -> None:
        self.c += scale * rng.standard_normal(self.c.shape)


class HeatControl(braidpy.App):
    """u <- S_dt (u + dt c_n g); J = |u_N - y|^2/2 + 1e-3 sum_i |u_i|^2; dJ/dc_n stored."""

    def __init__(self, data: HeatControlData, ntime: int):
        self.data = data
        self.op = HeatOperator(data.nx, HEAT_TSTOP / ntime)
        x = self.op.x
        self.g = np.exp(-50.0 * (x - 0.3) ** 2)
        self.target = 0.2 * np.sin(np.pi * x)
        self._sg = {}  # dt -> S_dt g
        self.dc = np.zeros(ntime)

    def gradient(self) -> np.ndarray:
        return self.dc

    def init(self, t):
        return self.op.initial() if t == self.tstart else np.zeros(self.op.nx)

    def step(self, u, t0, t1, status):
        dt = t1 - t0
        return self.op.solve(u + (dt * self.data.c[status.fine_index]) * self.g, dt)

    def step_adjoint(self, w, u, t0, t1, status):
        return self.op.solve(w, t1 - t0)  # S_dt is symmetric

    def step_gradient(self, w, u, t0, t1, status):
        dt = t1 - t0
        sg = self._sg.get(dt)
        if sg is None:
            sg = self._sg[dt] = self.op.solve(self.g, dt)
        self.dc[status.fine_index] = dt * float(sg @ w)

    def terminal_objective(self, u):
        d = u - self.target
        return 0.5 * float(d @ d)

    def terminal_gradient(self, u):
        return u - self.target

    def running_objective(self, u, t, status):
        return 1e-3 * float(u @ u)

    def running_gradient(self, u, t, status):
        return 2e-3 * u


class _Status:
    """What the serial loops pass as status (the fields the apps read)."""

    __slots__ = ("fine_index", "level", "t", "t0", "t1", "phase")

    def __init__(self):
        self.fine_index, self.level, self.phase = 0, 0, "final"


def serial_gradient(app, tstart: float, tstop: float, ntime: int) -> float:
    """J after a forward sweep that keeps every state and a backward adjoint sweep;
    the per-step gradients land in the app's arrays."""
    app.tstart, app.tstop, app.ntime = tstart, tstop, ntime
    times = [tstart + (i / ntime) * (tstop - tstart) for i in range(ntime + 1)]
    st = _Status()
    step, clone = app.step, app.clone
    u = app.init(tstart)
    traj = [clone(u)]
    for n in range(ntime):
        st.fine_index = n
        r = step(u, times[n], times[n + 1], st)
        if r is not None and r is not u:
            u = r
        traj.append(clone(u))
    running = callable(getattr(app, "running_objective", None))
    J = float(app.terminal_objective(traj[ntime]))
    w = clone(app.terminal_gradient(traj[ntime]))
    if running:
        for n in range(ntime + 1):
            st.t = times[n]
            J += float(app.running_objective(traj[n], times[n], st))
        app.sum(1.0, app.running_gradient(traj[ntime], times[ntime], st), 1.0, w)
    step_adjoint, step_gradient = app.step_adjoint, app.step_gradient
    for n in range(ntime - 1, -1, -1):
        st.fine_index = n
        step_gradient(w, traj[n], times[n], times[n + 1], st)
        r = step_adjoint(w, traj[n], times[n], times[n + 1], st)
        if r is not None and r is not w:
            w = r
        if running:
            app.sum(1.0, app.running_gradient(traj[n], times[n], st), 1.0, w)
    return J
