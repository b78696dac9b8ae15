"""What braidpy's optional CUDA module was compiled with and what it finds at run time."""

from __future__ import annotations

import ctypes
import importlib
from typing import Any, Dict, Optional

__all__ = ["cuda_info"]

#: cuDNN's shared libraries, newest first (looked up, never required).
_CUDNN = ("libcudnn.so.9", "libcudnn.so.8", "libcudnn.so", "cudnn64_9.dll", "cudnn64_8.dll")


def _cudnn_version() -> Optional[int]:
    for name in _CUDNN:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            get = lib.cudnnGetVersion
        except AttributeError:
            continue
        get.restype = ctypes.c_size_t
        return int(get())
    return None


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
        for), and ``import_error`` when the module is absent.

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
                "cudnn": _cudnn_version(), "error": None, "device_names": [],
                "architectures": "", "import_error": str(exc)}
    info = dict(module.info())
    info["cudnn"] = _cudnn_version()
    return info
