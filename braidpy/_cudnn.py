"""Where braidpy looks for cuDNN (loaded at first use by braidpy._cuda, never at build time).

In order: the library that the environment variable ``BRAIDPY_CUDNN_LIBRARY`` names (a
``libcudnn.so.9`` file or the directory holding it; when set, nothing else is tried), the
``nvidia-cudnn-cu13`` wheel's ``nvidia/cudnn/lib`` (found through importlib, without
importing anything of it), then ``libcudnn.so.9`` by the system loader's own search. The
wheel ships only the versioned name, which is why no unversioned ``libcudnn.so`` is asked
for.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path
from typing import List, Optional

__all__ = ["ENV", "SONAME", "candidates", "ctypes_version"]

#: The environment variable naming a cuDNN library (file or directory).
ENV = "BRAIDPY_CUDNN_LIBRARY"
#: cuDNN 9's library name (braidpy declares cuDNN 9's legacy convolution API).
SONAME = "libcudnn.so.9"


def _wheel_dirs() -> List[Path]:
    """``nvidia/cudnn/lib`` of an installed nvidia-cudnn-cu* wheel (none: [])."""
    try:
        spec = importlib.util.find_spec("nvidia.cudnn")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(loc) / "lib" for loc in spec.submodule_search_locations]


def candidates() -> List[str]:
    """The libraries to try, in order (see the module docstring).

    Examples
    --------
    >>> candidates()[-1] if ENV not in os.environ else SONAME
    'libcudnn.so.9'
    """
    named = os.environ.get(ENV, "")
    if named:
        path = Path(named)
        return [str(path / SONAME) if path.is_dir() else str(path)]
    found = [str(d / SONAME) for d in _wheel_dirs() if (d / SONAME).is_file()]
    return found + [SONAME]


def ctypes_version() -> Optional[int]:
    """cuDNN's version by ctypes, for when braidpy._cuda was not compiled; None if absent."""
    for name in candidates():
        try:
            lib = ctypes.CDLL(name)
            get = lib.cudnnGetVersion
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_size_t
        return int(get())
    return None
