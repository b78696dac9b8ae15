"""What braidpy's optional CUDA module was compiled with and what it finds at run time."""

from __future__ import annotations

import importlib
from typing import Any, Dict

from . import _cudnn

__all__ = ["cuda_info"]


def cuda_info() -> Dict[str, Any]:
    """What braidpy's GPU support was compiled with and what it finds (CuPy's
    ``show_config()``, PyTorch's ``torch.cuda.is_available()``). Never raises.

    Returns
    -------
    dict
        ``compiled`` (bool: the extension ``braidpy._cuda`` exists), ``cuda_runtime``
        (the CUDA runtime's version, e.g. 13000, or 0), ``driver`` (the driver's CUDA
        version, 0 when there is no driver), ``devices`` (how many GPUs), ``cudnn``
        (cuDNN's version where its library loads, else None), ``error`` (why no
        device was found, or None), ``device_names``, ``architectures`` (compiled
        for), ``cudnn_library`` (the file loaded, or None), ``cudnn_error`` (why no
        cuDNN loaded, or None), and ``import_error`` when the module is absent. cuDNN
        is looked for as :mod:`braidpy._cudnn` says (``BRAIDPY_CUDNN_LIBRARY``, the
        nvidia-cudnn-cu13 wheel, the system loader).

    Examples
    --------
    >>> info = cuda_info()
    >>> {"compiled", "cuda_runtime", "driver", "devices", "cudnn"} <= set(info)
    True
    """
    try:
        module = importlib.import_module("braidpy._cuda")
    except ImportError as exc:
        return {"compiled": False, "cuda_runtime": 0, "driver": 0, "devices": 0,
                "cudnn": _cudnn.ctypes_version(), "cudnn_library": None,
                "cudnn_error": None, "error": None, "device_names": [],
                "architectures": "", "import_error": str(exc)}
    info = dict(module.info())
    cudnn = module.cudnn_info()
    info["cudnn"] = cudnn["version"]
    info["cudnn_library"] = cudnn["library"]
    info["cudnn_error"] = cudnn["error"]
    return info
