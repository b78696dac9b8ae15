"""The braidpy app behind LayerParallel: layer steps, their adjoints and gradients in torch."""

from __future__ import annotations

import copy
import logging
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch.func import functional_call, vmap

from .._app import App
from ..backends import torch as torch_backend
from ._grouped import GroupedCall, grouped_call

__all__ = ["BlocksApp"]

logger = logging.getLogger("braidpy")

Params = Dict[str, torch.Tensor]


class BlocksApp(App):
    """Forward Euler over residual blocks: u_{n+1} = u_n + h F_n(u_n), with the adjoint.

    ``modules`` maps a layer index to the block module this rank steps with (its own
    blocks and the halo copies of neighbours' blocks that coarse or boundary steps
    need); ``params[n]`` holds the tensors block n computes with (refreshed before
    every forward solve: the own blocks' parameters, detached, and the halo blocks'
    received from their owners). ``own`` are the layers whose parameter gradients
    this rank computes (the steps into the time points it owns).

    With ``batch`` the app has braidpy's batched hooks: the blocks of one batched call
    run over their stacked parameters as one torch call per layer where the block's
    layers all have a grouped form (``grouped``, see :mod:`._grouped`), else as one
    ``torch.func.vmap`` of ``functional_call``. The path is decided once, before the
    first call (:meth:`check_batchable`): blocks that cannot share a batched call
    (different kinds, or modules drawing random numbers, which vmap refuses) take one
    call per block (:attr:`path`, :attr:`path_reason`). It never changes afterwards: an
    exception in a batched call propagates as it is, never retried block by block (a
    retry would hide a bug in the grouped or vmap path, or a block's own failure).
    """

    array_namespace = torch

    def __init__(self, batch: bool, grouped: bool = True):
        self.modules: Dict[int, torch.nn.Module] = {}
        self.own: range = range(0)
        self.params: Dict[int, Params] = {}
        self.buffers: Dict[int, Params] = {}
        self.x: Optional[torch.Tensor] = None
        self.grad_out: Optional[torch.Tensor] = None
        self.grads: Dict[int, Params] = {}
        self._backend: Any = None
        self.batch = batch
        self.path = "vmap" if batch else "off"
        self.path_reason = "" if batch else "batch=False"
        self.calls = {"grouped": 0, "vmap": 0, "per-block": 0}
        self._base: Optional[torch.nn.Module] = None
        self._try_grouped = grouped
        self._grouped: Optional[GroupedCall] = None
        self._local = np.zeros(0, dtype=np.int64)
        self._stacked: Params = {}
        self._stacked_buffers: Params = {}
        if batch:
            self.step_batch = self._step_batch  # type: ignore[method-assign, assignment]
            self.step_adjoint_batch = self._step_adjoint_batch
            self.step_gradient_batch = self._step_gradient_batch

    # ------------------------------------------------------------ set-up
    def set_device(self, device: Any) -> None:
        """States live on ``device``: received ones are built there."""
        self._backend = torch_backend.for_namespace(torch, device)
        self.array_device = self._backend.device

    @property
    def backend(self) -> Any:
        """The torch backend of the states' device (set by :meth:`set_device`): packs and
        unpacks rank messages."""
        return self._backend

    def check_batchable(self) -> None:
        """Decide once whether the local blocks can share batched calls (same class, same
        printed configuration, same parameter and buffer names, shapes and dtypes; no
        module drawing random numbers), and whether those can be grouped calls rather
        than vmap. The only place the path is chosen: batched calls never fall back."""
        if not self.batch or not self.modules:
            return
        first_n = min(self.modules)
        first = self.modules[first_n]

        def signature(m: torch.nn.Module) -> Tuple[Any, ...]:
            return (type(m), repr(m),
                    tuple((k, tuple(v.shape), v.dtype) for k, v in m.named_parameters()),
                    tuple((k, tuple(v.shape), v.dtype) for k, v in m.named_buffers()))

        sig = signature(first)
        for n, m in self.modules.items():
            if signature(m) != sig:
                self._use_per_block(f"block {n} differs from block {first_n} (class, "
                                    f"configuration, or parameter names/shapes/dtypes)")
                return
        random = _random_module(first)
        if random:
            self._use_per_block(f"block {first_n}'s {random} draws random numbers, which "
                                f"torch.func.vmap does not run")
            return
        # The structure every vmapped call runs: a copy without storage.
        self._base = copy.deepcopy(first).to("meta")
        if self._try_grouped:
            self._grouped, why = grouped_call(first)
            if self._grouped is not None:
                self.path = "grouped"
            else:
                self.path_reason = f"no grouped form, vmap runs: {why}"
                logger.info("braidpy.torch: batched steps run as torch.func.vmap: %s", why)

    def restack(self) -> None:
        """Stack the local blocks' parameters (once per forward) for the batched calls."""
        if self.path not in ("grouped", "vmap"):
            return
        self._local = np.array(sorted(self.params), dtype=np.int64)
        if not len(self._local):
            return
        rows = [self.params[int(n)] for n in self._local]
        brows = [self.buffers[int(n)] for n in self._local]
        self._stacked = {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
        self._stacked_buffers = {k: torch.stack([r[k] for r in brows]) for k in brows[0]}

    def _rows(self, ns: np.ndarray) -> Tuple[Params, Params]:
        """The stacked parameters (and buffers) of blocks ns: a strided view when the
        blocks are evenly spaced in the local stack, a gather otherwise."""
        pos = np.searchsorted(self._local, ns)
        if np.any(pos >= len(self._local)) or np.any(self._local[np.minimum(
                pos, len(self._local) - 1)] != ns):
            missing = sorted(set(ns.tolist()) - set(self._local.tolist()))
            raise RuntimeError(f"braidpy.torch: blocks {missing} are not on this rank "
                               f"(layer split bug)")
        m = len(pos)
        step = int(pos[1] - pos[0]) if m > 1 else 1
        if step > 0 and (m < 3 or bool(np.all(np.diff(pos) == step))):
            sel: Any = slice(int(pos[0]), int(pos[0]) + step * (m - 1) + 1, step)
        else:
            sel = torch.as_tensor(pos, device=next(iter(self._stacked.values())).device)
        return ({k: v[sel] for k, v in self._stacked.items()},
                {k: v[sel] for k, v in self._stacked_buffers.items()})

    def _use_per_block(self, reason: str) -> None:
        if self.path in ("grouped", "vmap"):
            self.path, self.path_reason = "per-block", reason
            logger.info("braidpy.torch: batched steps call the blocks one by one: %s", reason)

    # ------------------------------------------------------------ one block
    def _block(self, n: int) -> torch.nn.Module:
        m = self.modules.get(n)
        if m is None:
            raise RuntimeError(f"braidpy.torch: block {n} is not on this rank (layer split bug)")
        return m

    def _f(self, n: int, u: torch.Tensor) -> torch.Tensor:
        """F_n(u): an own block is called as it is, a halo block with its owner's
        parameters."""
        if n in self.own:
            return self.modules[n](u)
        return functional_call(self._block(n), (self.params[n], self.buffers[n]), (u,))

    def _vjp_state(self, n: int, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """(dF_n/du)(u)^T w."""
        return _pullback(lambda x: self._f(n, x), [u], w)[0]

    def _vjp_params(self, n: int, u: torch.Tensor, w: torch.Tensor) -> Params:
        """(dF_n/dtheta_n)(u)^T w, by parameter name (own blocks only)."""
        block, b = self._block(n), self.buffers[n]
        names = list(self.params[n])
        grads = _pullback(lambda *ps: functional_call(block, (dict(zip(names, ps)), b), (u,)),
                          [self.params[n][k] for k in names], w)
        return dict(zip(names, grads))

    # ------------------------------------------------------------ primal
    def init(self, t: float) -> torch.Tensor:
        # The input at t = 0; elsewhere the input is the guess (as braidpy.nn's app).
        return self.x.detach().clone()  # type: ignore[union-attr]

    def step(self, u: torch.Tensor, t0: float, t1: float, status: Any) -> torch.Tensor:
        with torch.no_grad():
            return u + (t1 - t0) * self._f(status.fine_index, u)

    def clone(self, u: torch.Tensor) -> torch.Tensor:
        return u.clone()

    def sum(self, a: float, x: torch.Tensor, b: float, y: torch.Tensor) -> None:  # noqa: A003
        self._backend.sum(a, x, b, y)

    def norm(self, u: torch.Tensor) -> float:
        return float(torch.linalg.vector_norm(u))

    def bufpack(self, u: torch.Tensor) -> Any:
        return self._backend.pack(u)

    def bufunpack(self, buf: Any) -> torch.Tensor:
        return self._backend.unpack(buf)

    # ------------------------------------------------------------ adjoint
    def step_adjoint(self, w: torch.Tensor, u: torch.Tensor, t0: float, t1: float,
                     status: Any) -> torch.Tensor:
        return w + (t1 - t0) * self._vjp_state(status.fine_index, u, w)

    def step_gradient(self, w: torch.Tensor, u: torch.Tensor, t0: float, t1: float,
                      status: Any) -> Params:
        h = t1 - t0
        return {k: h * g for k, g in self._vjp_params(status.fine_index, u, w).items()}

    def terminal_objective(self, u: torch.Tensor) -> float:
        return 0.0  # the loss is the user's, computed from the output

    def terminal_gradient(self, u: torch.Tensor) -> torch.Tensor:
        return self.grad_out  # type: ignore[return-value]

    # ------------------------------------------------------------ batched
    def _steps(self, t0s: np.ndarray, t1s: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        hs = torch.as_tensor(t1s - t0s, dtype=like.dtype, device=like.device)
        return hs.reshape((-1,) + (1,) * (like.dim() - 1))

    def _fv(self, P: Params, B: Params, U: torch.Tensor) -> torch.Tensor:
        if self._grouped is not None and self.path == "grouped":
            return self._grouped(P, U)
        base = self._base
        assert base is not None  # set by check_batchable on the vmap path
        return vmap(lambda p, b, x: functional_call(base, (p, b), (x,)))(P, B, U)

    def _batched(self, vmapped: Any, per_block: Any) -> Any:
        """Run a batched call on the path :meth:`check_batchable` chose: the grouped or
        vmapped version, else the per-block one. Whatever either raises propagates as it
        is (on the vmap path with a note on batch=False)."""
        path = self.path if self.path in ("grouped", "vmap") else "per-block"
        try:
            out = per_block() if path == "per-block" else vmapped()
        except Exception as exc:
            if path == "vmap" and hasattr(exc, "add_note"):
                exc.add_note("braidpy.torch: raised in a batched call through "
                             "torch.func.vmap; blocks that vmap cannot run (Python control "
                             "flow on a tensor's value, .item(), random numbers) need "
                             "LayerParallel(..., batch=False)")
            raise
        self.calls[path] += 1
        return out

    def _step_batch(self, us: Any, t0s: np.ndarray, t1s: np.ndarray, status: Any) -> Any:
        ns = status.fine_indices

        def vmapped() -> Any:
            U = torch.stack(list(us)) if isinstance(us, (list, tuple)) else us
            P, B = self._rows(ns)
            with torch.no_grad():
                R = U + self._steps(t0s, t1s, U) * self._fv(P, B, U)
            return list(R.unbind(0)) if isinstance(us, (list, tuple)) else R

        def per_block() -> Any:
            with torch.no_grad():
                out = [u + (float(t1) - float(t0)) * self._f(int(n), u)
                       for u, n, t0, t1 in zip(us, ns.tolist(), t0s.tolist(), t1s.tolist())]
            return out if isinstance(us, (list, tuple)) else torch.stack(out)

        return self._batched(vmapped, per_block)

    def _step_adjoint_batch(self, W: torch.Tensor, U: torch.Tensor, t0s: np.ndarray,
                            t1s: np.ndarray, status: Any) -> torch.Tensor:
        ns = status.fine_indices

        def vmapped() -> torch.Tensor:
            P, B = self._rows(ns)
            G = _pullback(lambda X: self._fv(P, B, X), [U], W)[0]
            return W + self._steps(t0s, t1s, U) * G

        def per_block() -> torch.Tensor:
            return torch.stack([
                W[k] + (float(t1s[k]) - float(t0s[k])) * self._vjp_state(n, U[k], W[k])
                for k, n in enumerate(ns.tolist())])

        return self._batched(vmapped, per_block)

    def _step_gradient_batch(self, W: torch.Tensor, U: torch.Tensor, t0s: np.ndarray,
                             t1s: np.ndarray, status: Any) -> None:
        ns = status.fine_indices

        def vmapped() -> None:
            P, B = self._rows(ns)
            names = list(P)
            G = _pullback(lambda *ps: self._fv(dict(zip(names, ps)), B, U),
                          [P[k] for k in names], W)
            hs = torch.as_tensor(t1s - t0s, dtype=U.dtype, device=U.device)
            scaled = [g * hs.reshape((-1,) + (1,) * (g.dim() - 1)) for g in G]
            for k, n in enumerate(ns.tolist()):
                self.grads[n] = {name: g[k] for name, g in zip(names, scaled)}

        def per_block() -> None:
            for k, n in enumerate(ns.tolist()):
                h = float(t1s[k]) - float(t0s[k])
                self.grads[n] = {name: h * g for name, g in
                                 self._vjp_params(n, U[k], W[k]).items()}

        self._batched(vmapped, per_block)
        return None


_DROPOUTS = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
             "FeatureAlphaDropout")


def _random_module(block: torch.nn.Module) -> str:
    """The name of a submodule of ``block`` that draws random numbers (a dropout with
    p > 0), or ''."""
    kinds = tuple(getattr(torch.nn, k) for k in _DROPOUTS if hasattr(torch.nn, k))
    for name, m in block.named_modules():
        if isinstance(m, kinds) and getattr(m, "p", 0) > 0:
            return f"{name or 'block'} ({type(m).__name__})"
    return ""


def _pullback(fn: Any, inputs: List[torch.Tensor], w: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """The vector-Jacobian product w^T d fn / d inputs, by one reverse sweep of torch's
    autograd through fn (recomputed at the given inputs, which are not changed)."""
    with torch.enable_grad():
        xs = [x.detach().requires_grad_() for x in inputs]
        return torch.autograd.grad(fn(*xs), xs, w)
