"""PyTorch integration: layer-parallel residual networks as an ``nn.Module``.

:class:`LayerParallel` runs a stack of residual blocks, x <- x + h F_n(x), by MGRIT over
the layers (split over MPI ranks), with ``backward`` by adjoint MGRIT. It needs the
``torch`` extra (``pip install -e '.[torch]'``); ``import braidpy`` never imports
torch, this subpackage does. See docs/torch.md.
"""

from .._extras import require

require("torch", "torch", "braidpy.torch")

from ._layer_parallel import DEFAULTS, LayerParallel  # noqa: E402 - after the check

__all__ = ["DEFAULTS", "LayerParallel"]
