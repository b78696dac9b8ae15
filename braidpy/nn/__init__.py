"""Neural-network layers as time steps for layer-parallel ResNet training."""

from __future__ import annotations

from .activations import (
    SMOOTH_RELU_EPS,
    Activation,
    activation_names,
    get_activation,
    relu,
    relu_derivative,
    smooth_relu,
    smooth_relu_derivative,
    tanh,
    tanh_derivative,
)
from .dense import (
    dense_adjoint,
    dense_adjoint_batched,
    dense_forward,
    dense_forward_batched,
    dense_gradient,
    dense_gradient_batched,
)

__all__ = ["Activation", "SMOOTH_RELU_EPS", "activation_names", "get_activation", "relu",
           "relu_derivative", "smooth_relu", "smooth_relu_derivative", "tanh",
           "tanh_derivative", "dense_forward", "dense_adjoint", "dense_gradient",
           "dense_forward_batched", "dense_adjoint_batched", "dense_gradient_batched"]
