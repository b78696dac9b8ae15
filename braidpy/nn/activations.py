"""Activation functions for layer-parallel ResNets: value and derivative, any array namespace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, Tuple, Union

import numpy as np

from ._common import _namespace

__all__ = ["Activation", "SMOOTH_RELU_EPS", "get_activation", "activation_names", "relu",
           "relu_derivative", "smooth_relu", "smooth_relu_derivative", "tanh",
           "tanh_derivative"]

#: Half-width of the quadratic blend of the smoothed ReLU (Günther et al., eq. (5.34)).
SMOOTH_RELU_EPS = 0.1


def tanh(x: Any) -> Any:
    """Hyperbolic tangent, elementwise.

    Examples
    --------
    >>> import numpy as np
    >>> float(tanh(np.array([0.0]))[0])
    0.0
    """
    return _namespace(x).tanh(x)


def tanh_derivative(x: Any) -> Any:
    """Derivative of tanh, 1 - tanh(x)**2, elementwise.

    Examples
    --------
    >>> import numpy as np
    >>> float(tanh_derivative(np.array([0.0]))[0])
    1.0
    """
    if x.__class__ is np.ndarray:  # the same operations, on one new array
        t = np.tanh(x)
        np.multiply(t, t, out=t)
        return np.subtract(1, t, out=t)
    t = _namespace(x).tanh(x)
    return 1 - t * t


def relu(x: Any) -> Any:
    """Rectified linear unit max(x, 0), elementwise.

    Examples
    --------
    >>> import numpy as np
    >>> relu(np.array([-1.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    xp = _namespace(x)
    return xp.where(x > 0, x, xp.zeros_like(x))


def relu_derivative(x: Any) -> Any:
    """Derivative of ReLU: 1 where x > 0, else 0 (the value 0 is used at the kink x = 0).

    Examples
    --------
    >>> import numpy as np
    >>> relu_derivative(np.array([-1.0, 0.0, 2.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    xp = _namespace(x)
    return xp.where(x > 0, xp.ones_like(x), xp.zeros_like(x))


def _clip(x: Any, eps: float) -> Any:
    """x clipped to [-eps, eps]."""
    xp = _namespace(x)
    return xp.where(x > eps, xp.full_like(x, eps), xp.where(x < -eps, xp.full_like(x, -eps), x))


def smooth_relu(x: Any, eps: float = SMOOTH_RELU_EPS) -> Any:
    """ReLU with a quadratic blend on [-eps, eps], elementwise (C1, piecewise C2).

    sigma(x) = max(x, 0) for abs(x) > eps, and (x + eps)**2 / (4 eps) for abs(x) <= eps.
    With eps = 0.1 this is 2.5 x**2 + 0.5 x + 0.025, the smoothed ReLU of Günther,
    Ruthotto, Schroder, Cyr, Gauger, "Layer-parallel training of deep residual neural
    networks", SIAM J. Math. Data Sci. 2 (2020), Sec. 5.1, eq. (5.34). Value and slope
    match the linear pieces at x = -eps (0, 0) and x = eps (eps, 1).

    Examples
    --------
    >>> import numpy as np
    >>> np.round(smooth_relu(np.array([-1.0, 0.0, 0.1, 2.0])), 12).tolist()
    [0.0, 0.025, 0.1, 2.0]
    """
    xp = _namespace(x)
    s = _clip(x, eps) + eps
    # Times the reciprocal, not divided: a division costs as much as the rest of a dense
    # step (the compiled kernels, csrc/cuda/kernels.hpp, do the same operations).
    return xp.where(x > eps, x, s * s * (1 / (4 * eps)))  # s = 0 below -eps


def smooth_relu_derivative(x: Any, eps: float = SMOOTH_RELU_EPS) -> Any:
    """Derivative of :func:`smooth_relu`: 0, (x + eps) / (2 eps) on [-eps, eps], then 1.

    Examples
    --------
    >>> import numpy as np
    >>> smooth_relu_derivative(np.array([-1.0, 0.0, 2.0])).tolist()
    [0.0, 0.5, 1.0]
    """
    return (_clip(x, eps) + eps) * (1 / (2 * eps))


@dataclass(frozen=True)
class Activation:
    """An elementwise activation: ``value(x)`` and its derivative ``derivative(x)``."""

    name: str
    value: Callable[[Any], Any]
    derivative: Callable[[Any], Any]

    def __call__(self, x: Any) -> Any:
        return self.value(x)


_REGISTRY: Dict[str, Activation] = {
    "tanh": Activation("tanh", tanh, tanh_derivative),
    "relu": Activation("relu", relu, relu_derivative),
    "smooth_relu": Activation("smooth_relu", smooth_relu, smooth_relu_derivative),
}


#: The activations above; each returns a new array (kernels may overwrite it).
_BUILTIN: FrozenSet[Activation] = frozenset(_REGISTRY.values())


#: An activation given by name or as an :class:`Activation` object.
ActivationLike = Union[str, Activation]


def activation_names() -> Tuple[str, ...]:
    """Names accepted by :func:`get_activation`, sorted.

    Examples
    --------
    >>> activation_names()
    ('relu', 'smooth_relu', 'tanh')
    """
    return tuple(sorted(_REGISTRY))


def get_activation(name: Union[str, Activation]) -> Activation:
    """The activation called ``name`` (an :class:`Activation` is returned unchanged).

    Raises
    ------
    ValueError
        If ``name`` is not one of :func:`activation_names`.

    Examples
    --------
    >>> get_activation("tanh").name
    'tanh'
    >>> get_activation("sigmoid")
    Traceback (most recent call last):
    ...
    ValueError: unknown activation 'sigmoid'; valid names: 'relu', 'smooth_relu', 'tanh'
    """
    if isinstance(name, Activation):
        return name
    a = _REGISTRY.get(name) if isinstance(name, str) else None
    if a is not None:
        return a
    valid = ", ".join(repr(n) for n in activation_names())
    raise ValueError(f"unknown activation {name!r}; valid names: {valid}")
