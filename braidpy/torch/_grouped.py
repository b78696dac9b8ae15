"""Grouped block calls: m blocks of one architecture run as one torch call per layer.

``torch.func.vmap(functional_call)`` runs any block over stacked parameters, but each
call pays about half a millisecond of functorch set-up, which for the small blocks of
deep narrow ResNets costs more than ten plain block calls (benchmarks/bench_torch.py).
Blocks that are ``nn.Sequential`` chains of layers with a direct batched form need no
vmap:

- ``nn.Linear``: one ``torch.baddbmm`` with the m weight matrices;
- ``nn.Conv2d`` (groups 1, zero padding, numeric padding): one convolution with
  ``groups = m``, the m blocks' channels side by side;
- parameter-free elementwise modules (tanh, ReLU, GELU, ...): applied to the stacked
  values as they are (the module itself is called, so its settings are current).

Only ``nn.Sequential`` and these leaf modules qualify, never a module with its own
``forward``: such a forward may branch on its attributes (a flag, ``self.training``)
or on values, and a recorded chain would silently keep the branch taken once, where
vmap calls the real forward every time. :func:`grouped_call` returns None with the
reason for anything else; the caller then uses vmap. Values carry the block index as
their leading axis.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

__all__ = ["GroupedCall", "grouped_call"]

Params = Dict[str, torch.Tensor]
Step = Callable[[Params, torch.Tensor], torch.Tensor]

# Parameter-free modules that act elementwise: the stacked value goes through as is.
_ELEMENTWISE = (torch.nn.Tanh, torch.nn.ReLU, torch.nn.Sigmoid, torch.nn.GELU, torch.nn.SiLU,
                torch.nn.ELU, torch.nn.LeakyReLU, torch.nn.Softplus, torch.nn.Hardtanh,
                torch.nn.Identity, torch.nn.Mish)


class GroupedCall:
    """F_n for m blocks at once: ``call(P, U)`` with ``P`` the blocks' parameters
    stacked along a new leading axis (``torch.func.stack_module_state``'s layout and
    names) and ``U`` their m inputs stacked the same way."""

    def __init__(self, steps: List[Step]):
        self._steps = steps

    def __call__(self, P: Params, U: torch.Tensor) -> torch.Tensor:
        for step in self._steps:
            U = step(P, U)
        return U


def _linear(prefix: str, layer: torch.nn.Linear) -> Step:
    has_bias = layer.bias is not None

    def step(P: Params, x: torch.Tensor) -> torch.Tensor:
        m, n_in = x.shape[0], x.shape[-1]
        rows = x.reshape(m, -1, n_in)
        w = P[prefix + "weight"].transpose(1, 2)  # (m, in, out)
        y = (torch.baddbmm(P[prefix + "bias"].unsqueeze(1), rows, w) if has_bias
             else torch.bmm(rows, w))
        return y.reshape(x.shape[:-1] + (w.shape[-1],))
    return step


def _conv2d(prefix: str, layer: torch.nn.Conv2d) -> Step:
    has_bias = layer.bias is not None
    stride, padding, dilation = layer.stride, layer.padding, layer.dilation

    def step(P: Params, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 5:
            raise ValueError(f"the grouped Conv2d needs inputs (N, C, H, W) per block, got "
                             f"a stack of shape {tuple(x.shape)}")
        m, b, c, h, w = x.shape
        weight = P[prefix + "weight"]  # (m, out, c, kh, kw)
        out = weight.shape[1]
        side_by_side = x.transpose(0, 1).reshape(b, m * c, h, w)
        y = F.conv2d(side_by_side, weight.reshape((m * out,) + weight.shape[2:]),
                     P[prefix + "bias"].reshape(m * out) if has_bias else None,
                     stride, padding, dilation, groups=m)
        return y.reshape(b, m, out, y.shape[-2], y.shape[-1]).transpose(0, 1)
    return step


def _elementwise(module: torch.nn.Module) -> Step:
    return lambda P, x: module(x)


def _steps_of(prefix: str, module: torch.nn.Module,
              steps: List[Step]) -> Optional[str]:
    """Append module's steps; the reason it has no grouped form, or None."""
    what = prefix[:-1] or "the block"
    if type(module) is torch.nn.Sequential:
        for name, child in module.named_children():
            why = _steps_of(f"{prefix}{name}.", child, steps)
            if why is not None:
                return why
        return None
    if type(module) is torch.nn.Linear:
        steps.append(_linear(prefix, module))
        return None
    if type(module) is torch.nn.Conv2d:
        if module.groups != 1 or module.padding_mode != "zeros" or \
                isinstance(module.padding, str):
            return f"{what}: a Conv2d with groups, a padding mode or string padding"
        steps.append(_conv2d(prefix, module))
        return None
    if type(module) in _ELEMENTWISE and not any(True for _ in module.parameters()):
        steps.append(_elementwise(module))
        return None
    return (f"{what}: {type(module).__name__} is not nn.Sequential, nn.Linear, nn.Conv2d "
            f"or a parameter-free elementwise activation")


def grouped_call(block: torch.nn.Module) -> Tuple[Optional[GroupedCall], str]:
    """The grouped form of ``block``, or None and why not (see the module docstring)."""
    if any(True for _ in block.buffers()):
        return None, "the block has buffers"
    steps: List[Step] = []
    why = _steps_of("", block, steps)
    if why is not None:
        return None, why
    return GroupedCall(steps), ""
