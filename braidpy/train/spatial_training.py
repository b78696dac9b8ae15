"""Training with image rows split over the space ranks of a ProcessGrid.

On a grid data x space x layers with space S > 1, the S ranks of a space group hold the
same samples and the same layers; each holds one band of image rows
(:class:`~braidpy.parallel.spatial.RowSplit`) of every MGRIT state. What they compute:

- the residual layers: :class:`SpaceSplitConvLayer`, the conv step, its state adjoint
  and its parameter gradient on a band, with the halo rows of
  :mod:`braidpy.parallel.spatial` (non-blocking, interior first). The filter and bias
  gradients are this band's part only;
- the opening: on the band, from the rows of the input around it (every rank has the
  input data, so no messages), and its gradient's band part;
- the classifier: the final state's bands are gathered, and every rank of the group
  computes the loss, the terminal adjoint (keeping its band) and the classifier's
  gradient from the whole image, the same bits on every rank and the same as on one
  rank (one gather of the final state per objective);
- MGRIT's state norm: the square root of the sum of the bands' squares, added in rank
  order, so every rank of the group makes the same MGRIT decisions;
- the gradient: the bands' parts summed over the space group in rank order, once per
  gradient (the classifier's entries come from space rank 0 alone, so they stay exact).

Every reduction is an exchange of each rank's values followed by a sum in rank order:
the same on every rank, equal to the one-rank result to rounding.

Failures. A callback failing on one rank would leave its space peers waiting for its
halo rows: the layer-parallel core makes the failed rank's further callbacks no-ops.
So every wait of a space group also listens for a *failure note*, which a rank sends
to its space peers as soon as a callback fails on it, or its solve stops with an
error. A rank receiving one raises ``braidpy.BraidError`` in its own callback; the
usual agreement points then stop every rank of the grid. Messages carry the number of
the evaluation (gradient, objective, validation) they belong to, so nothing left over
from a failed evaluation is ever taken for a later one's.

Only convolutional networks on the host (NumPy) in a layer-parallel mode (``exact`` or
``oneshot``) can be split: :func:`check_space_grid` says why not otherwise.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from .._errors import BraidError
from ..nn.activations import Activation
from ..nn.layers import classifier_gradient, classifier_loss
from ..nn.network import ResNet
from ..nn.resnet import ResNetApp
from ..parallel.comm import free_quietly, mpi, rank_size
from ..parallel.spatial import (RowSplit, conv2d_input_vjp_rows, conv2d_rows, rows_extended,
                                rows_with_halo, zero_rows)
from .evaluate import LayerParallelEvaluator

__all__ = ["SpaceChannel", "SpaceSplitConvLayer", "SpaceSplitResNetApp",
           "SpaceParallelEvaluator", "check_space_grid", "max_space", "space_evaluator"]

_NOTE_TAG = 40          # failure notes: one int64, the evaluation they belong to
_TAG_BASE, _TAG_CYCLE = 100, 8000  # 3 tags per evaluation: halo up, halo down, exchange


class SpaceFailure(BraidError):
    """A space peer reported a failure: this rank stops too."""


# ---------------------------------------------------------------------------- checks
def max_space(net: ResNet, mode: str = "oneshot") -> int:
    """The most space ranks training ``net`` in ``mode`` can use: 1 for dense networks,
    serial mode or a device other than the host; else the most bands of image rows
    no thinner than the kernel radius (one row for a 1x1 kernel)."""
    if net.kind != "conv" or mode == "serial" or not net.placement.is_host:
        return 1
    height, r = net.input_shape[1], (net.kernel - 1) // 2
    return max(1, height // max(r, 1))


def check_space_grid(grid: Any, net: ResNet, mode: str = "oneshot") -> None:
    """ValueError, naming the grid and why, if ``net`` cannot train in ``mode`` with
    ``grid.space`` space ranks."""
    space = grid.space
    if space == 1:
        return
    where = f"training on the grid {grid.describe()}"
    if net.kind != "conv":
        raise ValueError(
            f"{where} splits image rows over {space} space ranks, but the network is dense "
            f"(input shape {net.input_shape}): it has no rows to split; use --grid D,1,L")
    if mode == "serial":
        raise ValueError(
            f"{where}: mode 'serial' runs the whole network on every rank; space ranks "
            f"need a layer-parallel mode ('exact' or 'oneshot'), or use --grid D,1,L")
    if not net.placement.is_host:
        raise ValueError(f"{where}: spatially split training exchanges host (NumPy) "
                         f"arrays; the network lives on {net.placement.name}")
    most = max_space(net, mode)
    if space > most:
        height, r = net.input_shape[1], (net.kernel - 1) // 2
        raise ValueError(
            f"{where}: {height} image rows over {space} space ranks give bands thinner "
            f"than the kernel radius {r}; at most {most} space ranks for this network")


# ---------------------------------------------------------------------------- channel
class SpaceChannel(RowSplit):
    """The rows of an image split over a space group, on a private duplicate of its
    communicator, with failure notes and per-evaluation tags (module docstring).

    Every rank of the group must call :meth:`begin` before each evaluation, in the same
    order; :meth:`exchange`, :meth:`sum`, :meth:`gather` and the halo waits of the
    convolutions are collective over the group.
    """

    def __init__(self, comm: Any, height: int):
        size = rank_size(comm)[1]
        super().__init__(comm.Dup() if size > 1 else None, height)
        self.epoch = 0
        self.failed = False
        self._noted = False
        self._sends: List[Tuple[Any, Any]] = []  # (request, buffer) of notes
        self._stranded: List[Any] = []           # what a failed wait left behind
        self._note_buf = np.zeros(1, dtype=np.int64)
        self._note: Any = None

    # ------------------------------------------------------------ evaluations
    def begin(self) -> None:
        """A new evaluation: new tags; earlier failures are forgotten."""
        self.epoch += 1
        self.failed = self._noted = False
        self._sends = [(r, b) for r, b in self._sends if not r.Test()]
        if self.comm is not None and self._note is None:
            self._post_note()

    @property
    def tags(self) -> tuple:
        base = _TAG_BASE + 3 * (self.epoch % _TAG_CYCLE)
        return (base, base + 1)

    @property
    def _exchange_tag(self) -> int:
        return _TAG_BASE + 3 * (self.epoch % _TAG_CYCLE) + 2

    def _post_note(self) -> None:
        self._note = self.comm.Irecv([self._note_buf, mpi().INT64_T], mpi().ANY_SOURCE,
                                     _NOTE_TAG)

    def fail(self) -> None:
        """This rank failed in this evaluation: tell the space peers (once)."""
        self.failed = True
        if self.comm is None or self._noted:
            return
        self._noted = True
        MPI = mpi()
        for peer in range(self.size):
            if peer != self.rank:
                buf = np.array([self.epoch], dtype=np.int64)
                self._sends.append((self.comm.Isend([buf, MPI.INT64_T], peer, _NOTE_TAG),
                                    buf))

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Run a block; if it raises, tell the space peers first."""
        try:
            yield
        except BaseException:
            self.fail()
            raise

    def wait(self, requests: List[Any], keep: Any = ()) -> None:
        """Wait for ``requests``, or raise :class:`SpaceFailure` when a space peer
        reports a failure of this evaluation (the requests are then left pending, their
        buffers kept)."""
        if self.failed:
            self._stranded.append((requests, keep))
            raise SpaceFailure("a space peer failed in this evaluation")
        MPI = mpi()
        pending = list(requests)
        while pending:
            i = MPI.Request.Waitany(pending + [self._note])
            if i < len(pending):
                pending.pop(i)
                continue
            epoch = int(self._note_buf[0])
            self._post_note()
            if epoch == self.epoch:  # else: left over from an earlier evaluation
                self.failed = True
                self._stranded.append((pending, keep))
                raise SpaceFailure(f"space rank failed in evaluation {epoch}; this rank "
                                   f"stops too")

    # ------------------------------------------------------------ reductions
    def exchange(self, mine: np.ndarray, shapes: List[Tuple[int, ...]]) -> List[np.ndarray]:
        """Every rank's float64 array (rank s's of shape ``shapes[s]``), in rank order."""
        mine = np.ascontiguousarray(mine, dtype=np.float64)
        if self.comm is None:
            return [mine]
        MPI = mpi()
        tag = self._exchange_tag
        out = [mine if s == self.rank else np.empty(shapes[s]) for s in range(self.size)]
        reqs = []
        for s in range(self.size):
            if s != self.rank:
                reqs.append(self.comm.Isend([mine, MPI.DOUBLE], s, tag))
                reqs.append(self.comm.Irecv([out[s], MPI.DOUBLE], s, tag))
        self.wait(reqs, (mine, out))
        return out

    def sum(self, values: Any) -> np.ndarray:
        """The sum of every rank's ``values`` (same shape everywhere), added in rank
        order: the same bits on every rank."""
        a = np.asarray(values, dtype=np.float64)
        parts = self.exchange(a, [a.shape] * self.size)
        total = parts[0].copy()
        for p in parts[1:]:
            total += p
        return total

    def join_bands(self, band: np.ndarray) -> np.ndarray:
        """The whole (batch, C, H, W) image from every rank's band of rows."""
        band = np.asarray(band, dtype=np.float64)
        n, c, _, w = band.shape
        parts = self.exchange(band, [(n, c, len(rows), w) for rows in self.rows])
        return parts[0].copy() if self.size == 1 else np.concatenate(parts, axis=2)

    def free(self) -> None:
        """Release the duplicate communicator (pending notes are cancelled)."""
        note, self._note = self._note, None
        if note is not None:
            try:
                note.Cancel()
                note.Wait()
            except Exception:  # noqa: BLE001 - at shutdown
                pass
        comm, self.comm = self.comm, None
        free_quietly(comm)

    def __del__(self):
        self.free()


# ---------------------------------------------------------------------------- layer
class SpaceSplitConvLayer:
    """A :class:`~braidpy.nn.ConvLayer`'s calls on bands of rows (collective over the
    channel): the same step, state adjoint and parameter gradient as the layer computes
    on the whole image, the gradient being this band's part (sum it over the group)."""

    def __init__(self, layer: Any, channel: SpaceChannel):
        self.inner = layer
        self.channel = channel
        self.kernel = layer.kernel
        self.activation: Activation = layer.activation
        self._radius = (layer.kernel - 1) // 2
        self._thinnest = min(len(rows) for rows in channel.rows)

    # Every call exchanges one halo (for all the intervals of a batched call) and runs
    # the whole layer's own kernel on the band extended by it: a "same" correlation of
    # the extended band is exact on the band's rows. The adjoint needs act'(z) on the r
    # rows around the band too, hence u's halo of 2r rows; bands thinner than that take
    # the adjoint of parallel.spatial's strip convolutions instead, interval by interval.
    def forward(self, u: Any, K: Any, b: Any, h: Any) -> Any:
        return self._forward(self.inner.forward, u, K, b, h)

    def adjoint(self, w: Any, u: Any, K: Any, b: Any, h: Any) -> Any:
        if self._thinnest < 2 * self._radius:
            return self._adjoint_strips(w, u, K, b, h)
        return self._adjoint(self.inner.adjoint, w, u, K, b, h)

    def gradient(self, w: Any, u: Any, K: Any, b: Any, h: Any) -> Tuple[Any, Any]:
        return self._gradient(self.inner.gradient, w, u, K, b, h)

    def forward_batched(self, U: Any, Ks: Any, bs: Any, hs: Any) -> Any:
        return self._forward(self.inner.forward_batched, U, Ks, bs, hs)

    def adjoint_batched(self, W: Any, U: Any, Ks: Any, bs: Any, hs: Any) -> Any:
        if self._thinnest < 2 * self._radius:
            return np.stack([self._adjoint_strips(W[i], U[i], Ks[i], bs[i], hs[i])
                             for i in range(len(U))])
        return self._adjoint(self.inner.adjoint_batched, W, U, Ks, bs, hs)

    def gradient_batched(self, W: Any, U: Any, Ks: Any, bs: Any, hs: Any) -> Tuple[Any, Any]:
        return self._gradient(self.inner.gradient_batched, W, U, Ks, bs, hs)

    def _forward(self, call: Any, U: Any, *params: Any) -> Any:
        r = self._radius
        if r == 0:
            return call(U, *params)
        ext = rows_extended(U, r, self.channel)
        return np.ascontiguousarray(call(ext, *params)[..., r:-r, :])

    def _adjoint(self, call: Any, W: Any, U: Any, *params: Any) -> Any:
        r = self._radius
        if r == 0:
            return call(W, U, *params)
        ext_u, ext_w = rows_extended(U, 2 * r, self.channel, (W, r))  # both halos at once
        return np.ascontiguousarray(call(zero_rows(ext_w, r), ext_u, *params)
                                    [..., 2 * r:-2 * r, :])

    def _gradient(self, call: Any, W: Any, U: Any, *params: Any) -> Tuple[Any, Any]:
        r = self._radius
        if r == 0:
            return call(W, U, *params)
        # W zero on the halo rows: only this band's output pixels count here.
        return call(zero_rows(W, r), rows_extended(U, r, self.channel), *params)

    def _adjoint_strips(self, w: Any, u: Any, K: Any, b: Any, h: Any) -> Any:
        z = conv2d_rows(u, K, self.channel) + np.reshape(b, (-1, 1, 1))
        g = h * (w * self.activation.derivative(z))
        return w + conv2d_input_vjp_rows(g, K, self.channel)


# ---------------------------------------------------------------------------- app
class SpaceSplitResNetApp(ResNetApp):
    """A :class:`~braidpy.nn.ResNetApp` whose states are this rank's band of rows
    (see the module docstring). ``X`` and ``C`` are the whole batch, as on one rank."""

    def __init__(self, net: ResNet, params: Any, X: Any, C: Any = None, *,
                 channel: SpaceChannel):
        self.channel = channel
        super().__init__(net, params, X, C)
        self.layer = SpaceSplitConvLayer(net.layer, channel)
        self._radius = (net.kernel - 1) // 2 if net.opening == "conv" else 0

    # --------------------------------------------------------- the image's ends
    def initial_state(self) -> Any:
        r, rows = self._radius, self.channel.mine
        u = self.net.open(self.params, rows_with_halo(self.X, rows, r))
        return np.ascontiguousarray(u[:, :, r:r + len(rows)])

    def opening_gradient(self, w0: Any) -> Dict[str, Any]:
        r, rows = self._radius, self.channel.mine
        ext = rows_with_halo(self.X, rows, r)
        w = np.zeros(w0.shape[:2] + (ext.shape[2], w0.shape[3]))
        w[:, :, r:r + len(rows)] = w0  # zero on the halo rows: only this band counts
        return self.net.opening_gradient(self.params, ext, w)

    def classifier_state(self, u: Any) -> Any:
        with self.channel.guard():
            return self.channel.join_bands(u)

    def terminal_objective(self, u: Any) -> float:
        with self.channel.guard():
            v = self._views
            return float(classifier_loss(self.channel.join_bands(u), self.C, v["W"], v["mu"]))

    def terminal_gradient(self, u: Any) -> Any:
        with self.channel.guard():
            v = self._views
            _, du, dW, dmu = classifier_gradient(self.channel.join_bands(u), self.C, v["W"],
                                                 v["mu"])
            if self.channel.rank != 0:  # counted once in the sum over the group
                dW, dmu = np.zeros_like(dW), np.zeros_like(dmu)
            self.classifier_grad = {"W": dW, "mu": dmu}
            rows = self.channel.mine
            return np.ascontiguousarray(du[:, :, rows.start:rows.stop])

    def norm(self, u: Any) -> float:
        with self.channel.guard():
            a = np.ascontiguousarray(u).reshape(-1)
            return float(np.sqrt(self.channel.sum([float(np.dot(a, a))])[0]))

    # --------------------------------------------------------- guarded callbacks
    def init(self, t: float) -> Any:
        with self.channel.guard():
            return super().init(t)

    def step(self, u: Any, t0: float, t1: float, status: Any) -> Any:
        with self.channel.guard():
            return super().step(u, t0, t1, status)

    def step_stacked(self, U: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        with self.channel.guard():
            return super().step_stacked(U, t0s, t1s, status)

    def step_adjoint(self, w: Any, u: Any, t0: float, t1: float, status: Any) -> Any:
        with self.channel.guard():
            return super().step_adjoint(w, u, t0, t1, status)

    def step_adjoint_batch(self, W: Any, U: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        with self.channel.guard():
            return super().step_adjoint_batch(W, U, t0s, t1s, status)

    def step_gradient(self, w: Any, u: Any, t0: float, t1: float, status: Any) -> Any:
        with self.channel.guard():
            return super().step_gradient(w, u, t0, t1, status)

    def step_gradient_batch(self, W: Any, U: Any, t0s: Any, t1s: Any, status: Any) -> Any:
        with self.channel.guard():
            return super().step_gradient_batch(W, U, t0s, t1s, status)


# ---------------------------------------------------------------------------- evaluator
class _NotifyingRound:
    """An AveragingRound whose guarded blocks tell the space peers of a failure before
    the round's agreement over the grid (which they might otherwise never reach)."""

    def __init__(self, rnd: Any, channel: SpaceChannel):
        self._rnd, self._channel = rnd, channel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rnd, name)

    @contextmanager
    def guarded(self, what: str) -> Iterator[None]:
        with self._rnd.guarded(what):
            try:
                yield
            except SpaceFailure:
                # Stopped for a peer's failure: nothing of its own to report, so the
                # grid's agreement names the peer's error (BraidError here).
                self._channel.fail()
                self._rnd.point(what)
                raise
            except BaseException:
                self._channel.fail()
                raise


class SpaceParallelEvaluator:
    """A :class:`~braidpy.train.LayerParallelEvaluator` of :class:`SpaceSplitResNetApp`
    apps whose gradient is summed over the space group; its answers are the whole
    image's, the same on every rank of the group. Build it with :func:`space_evaluator`.
    """

    def __init__(self, inner: LayerParallelEvaluator, channel: SpaceChannel):
        self.inner = inner
        self.channel = channel
        self.net = inner.net
        self.mode = inner.mode

    @property
    def step_calls(self) -> int:
        return self.inner.step_calls

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return self.inner.batch_shape

    def gradient(self, params: Any, X: Any, C: Any, average: Any = None
                 ) -> Tuple[float, Any, Dict[str, Any]]:
        self.channel.begin()
        rnd = None if average is None else _NotifyingRound(average, self.channel)
        with self.channel.guard():
            loss, grad, stats = self.inner.gradient(params, X, C, average=rnd)
        return loss, self.channel.sum(grad), stats

    def loss(self, params: Any, X: Any, C: Any) -> float:
        self.channel.begin()
        with self.channel.guard():
            return self.inner.loss(params, X, C)

    def accuracy(self, params: Any, X: Any, C: Any) -> float:
        self.channel.begin()
        with self.channel.guard():
            return self.inner.accuracy(params, X, C)

    def set_oneshot(self, m1: int, m2: int) -> None:
        """One-shot iterations from the next gradient on (every rank alike)."""
        self.inner.set_oneshot(m1, m2)

    def warm_state(self) -> Dict[str, Any]:
        """The inner warm state with every band joined into the whole image (on the
        ranks where the inner state is complete: layer rank 0 of each group)."""
        self.channel.begin()
        mine = self.inner.warm_state()
        if not mine:
            return mine
        out: Dict[str, Any] = {"batch_shape": mine["batch_shape"]}
        for part in ("primal", "adjoint"):
            states = mine.get(part, {})
            out[part] = {n: self.channel.join_bands(states[n]) for n in sorted(states)}
        return out

    def load_warm_state(self, state: Mapping[str, Any]) -> None:
        """A warm state of whole images (any grid's), cut to this rank's band."""
        if not state:
            return
        rows = self.channel.mine
        band = {"batch_shape": state.get("batch_shape", self.batch_shape)}
        for part in ("primal", "adjoint"):
            band[part] = {n: np.ascontiguousarray(np.asarray(u)[:, :, rows.start:rows.stop])
                          for n, u in state.get(part, {}).items()}
        self.inner.load_warm_state(band)

    def free(self) -> None:
        self.channel.free()


def space_evaluator(net: ResNet, grid: Any, params: Any, X: Any, C: Any, *,
                    mgrit: Any = None, oneshot: Optional[Tuple[int, int]] = None,
                    validation: str = "sequential") -> SpaceParallelEvaluator:
    """The evaluator of one data group's shard on ``grid`` (space > 1): MGRIT over
    ``grid.layers_comm`` on bands of rows split over ``grid.space_comm`` (collective
    over the space group)."""
    channel = SpaceChannel(grid.space_comm, net.input_shape[1])

    def make_app(net_: ResNet, params_: Any, X_: Any, C_: Any) -> SpaceSplitResNetApp:
        return SpaceSplitResNetApp(net_, params_, X_, C_, channel=channel)

    inner = LayerParallelEvaluator(net, params, X, C, comm=grid.layers_comm, mgrit=mgrit,
                                   oneshot=oneshot, make_app=make_app, validation=validation)
    return SpaceParallelEvaluator(inner, channel)
