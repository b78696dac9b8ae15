"""CPU tensors as NumPy states: the compiled core's array paths for LayerParallel.

With torch tensors as states the core calls back into Python for every vector
operation (a clone, a sum ``a x + b y``, a norm, a stack and write-back per batched
call), a few microseconds each and thousands per gradient. A float64 or float32 CPU
tensor and a NumPy array can share memory (``torch.from_numpy``, ``Tensor.numpy``), so
:class:`HostBlocksApp` hands the core NumPy arrays and its blocks torch views of them:
the core then runs its own clone/sum/norm, stacked blocks with row views and its
C++ message packing. The blocks read the core's states through shared memory (no
conversion copies); a batched step's result is written into the core's block once, as
with torch states. The torch work is the wrapped
:class:`~braidpy.torch._app.BlocksApp`'s, unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._app import App
from ._app import BlocksApp

__all__ = ["HostBlocksApp", "takes_host_states"]


def takes_host_states(x: torch.Tensor) -> bool:
    """True for inputs whose states can be NumPy views: float64/float32 on the CPU."""
    return x.device.type == "cpu" and x.dtype in (torch.float64, torch.float32)


def _view(a: np.ndarray) -> torch.Tensor:
    """The tensor sharing a state's memory (torch takes no negative strides or
    read-only arrays: those are copied)."""
    if not a.flags.writeable or any(s < 0 for s in a.strides):
        a = np.array(a, order="C", copy=True)
    return torch.from_numpy(a)


def _array(t: torch.Tensor) -> np.ndarray:
    """A tensor's values as a NumPy array (shared memory; contiguous first)."""
    return t.detach().contiguous().numpy()


class HostBlocksApp(App):
    """The app of :class:`~braidpy.torch._app.BlocksApp` ``inner`` with NumPy states.

    Vector operations and messages are :class:`braidpy.App`'s defaults (so the core
    runs them itself); the blocks see the states through shared memory.
    """

    def __init__(self, inner: BlocksApp):
        self.inner = inner
        if inner.batch:
            self.step_stacked = self._step_stacked
            self.step_adjoint_batch = self._step_adjoint_batch
            self.step_gradient_batch = self._step_gradient_batch

    # ------------------------------------------------------------ conversions
    @staticmethod
    def state_of(x: torch.Tensor) -> np.ndarray:
        """A new NumPy state holding x's values."""
        return np.array(_array(x), order="C", copy=True)

    @staticmethod
    def tensor_of(u: Any) -> Any:
        """The tensor sharing a state's memory (None stays None)."""
        return None if u is None else _view(u)

    # ------------------------------------------------------------ primal
    def init(self, t: float) -> np.ndarray:
        return self.state_of(self.inner.x)  # type: ignore[arg-type]

    def step(self, u: np.ndarray, t0: float, t1: float, status: Any) -> np.ndarray:
        return _array(self.inner.step(_view(u), t0, t1, status))

    def _step_stacked(self, U: np.ndarray, t0s: np.ndarray, t1s: np.ndarray,
                      status: Any) -> None:
        U[...] = _array(self.inner.step_batch(_view(U), t0s, t1s, status))

    # ------------------------------------------------------------ adjoint
    def step_adjoint(self, w: np.ndarray, u: np.ndarray, t0: float, t1: float,
                     status: Any) -> np.ndarray:
        return _array(self.inner.step_adjoint(_view(w), _view(u), t0, t1, status))

    def step_gradient(self, w: np.ndarray, u: np.ndarray, t0: float, t1: float,
                      status: Any) -> Any:
        return self.inner.step_gradient(_view(w), _view(u), t0, t1, status)

    def _step_adjoint_batch(self, W: np.ndarray, U: np.ndarray, t0s: np.ndarray,
                            t1s: np.ndarray, status: Any) -> np.ndarray:
        return _array(self.inner.step_adjoint_batch(_view(W), _view(U), t0s, t1s, status))

    def _step_gradient_batch(self, W: np.ndarray, U: np.ndarray, t0s: np.ndarray,
                             t1s: np.ndarray, status: Any) -> None:
        self.inner.step_gradient_batch(_view(W), _view(U), t0s, t1s, status)

    def terminal_objective(self, u: np.ndarray) -> float:
        return 0.0  # the loss is the user's, computed from the output

    def terminal_gradient(self, u: np.ndarray) -> np.ndarray:
        return _array(self.inner.grad_out)  # type: ignore[arg-type]
