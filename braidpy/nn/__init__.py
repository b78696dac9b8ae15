"""Neural-network layers as time steps for layer-parallel ResNet training.

Modules: :mod:`~braidpy.nn.activations`; the residual layers' kernels as functions,
:mod:`~braidpy.nn.dense` and :mod:`~braidpy.nn.conv` (im2col); :mod:`~braidpy.nn.kernels`,
the kernel backends and how a layer picks one; :mod:`~braidpy.nn.residual`, the layer
objects :class:`DenseLayer` and :class:`ConvLayer` that own their kernels;
:mod:`~braidpy.nn.layers`, the opening layers and the softmax classifier;
:mod:`~braidpy.nn.network`, :class:`ResNet` (architecture, parameter layout, serial
reference); :mod:`~braidpy.nn.resnet`, :class:`ResNetApp` (the MGRIT app).
:class:`Placement` and :func:`placement`: where a network's numbers live
(``ResNet(..., device="cuda")``; NumPy on the host by default).
"""

from __future__ import annotations

from .._device import Placement, placement
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
from .conv import (
    conv2d,
    conv2d_input_vjp,
    conv2d_weight_vjp,
    conv_adjoint,
    conv_adjoint_batched,
    conv_forward,
    conv_forward_batched,
    conv_gradient,
    conv_gradient_batched,
)
from .dense import (
    dense_adjoint,
    dense_adjoint_and_gradient,
    dense_adjoint_batched,
    dense_forward,
    dense_forward_batched,
    dense_gradient,
    dense_gradient_batched,
    dense_sweep_backward,
    dense_sweep_forward,
)
from .kernels import LayerKernels, backend_names, choose_kernels, select_kernels
from .layers import (
    accuracy,
    classifier_gradient,
    classifier_logits,
    classifier_loss,
    classifier_predict,
    conv_opening,
    conv_opening_gradient,
    dense_opening,
    dense_opening_gradient,
    replicate_opening,
    zero_pad_opening,
)
from .network import OPENINGS, ResNet
from .residual import ConvLayer, DenseLayer
from .resnet import ResNetApp

__all__ = ["Activation", "SMOOTH_RELU_EPS", "activation_names", "get_activation", "relu",
           "relu_derivative", "smooth_relu", "smooth_relu_derivative", "tanh",
           "tanh_derivative", "dense_forward", "dense_adjoint", "dense_gradient",
           "dense_adjoint_and_gradient", "dense_forward_batched", "dense_adjoint_batched",
           "dense_gradient_batched", "dense_sweep_forward", "dense_sweep_backward",
           "conv2d", "conv2d_input_vjp", "conv2d_weight_vjp", "conv_forward", "conv_adjoint",
           "conv_gradient", "conv_forward_batched", "conv_adjoint_batched",
           "conv_gradient_batched", "dense_opening", "dense_opening_gradient", "conv_opening",
           "conv_opening_gradient", "replicate_opening", "zero_pad_opening",
           "classifier_logits", "classifier_loss", "classifier_gradient", "classifier_predict",
           "accuracy", "DenseLayer", "ConvLayer", "LayerKernels", "backend_names",
           "choose_kernels", "select_kernels", "OPENINGS", "ResNet", "ResNetApp", "Placement",
           "placement"]
