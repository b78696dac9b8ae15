"""Checkpoint files: the whole training state, written atomically.

The file is a pickle of plain Python and NumPy objects. Load checkpoints only from
sources you trust (unpickling can run code).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Dict

__all__ = ["save", "load", "FORMAT"]

FORMAT = "braidpy-train-checkpoint-1"


def save(path: Any, state: Dict[str, Any]) -> None:
    """Write ``state`` to ``path`` via a temporary file and a rename, so that a run
    killed while saving leaves the previous checkpoint intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump({"format": FORMAT, "state": state}, f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: Any) -> Dict[str, Any]:
    """Read a checkpoint written by :func:`save`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with open(path, "rb") as f:
        try:
            data = pickle.load(f)
        except Exception as exc:  # noqa: BLE001 - reported with the file name
            raise ValueError(f"{path} is not a braidpy checkpoint ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a braidpy checkpoint (format "
                         f"{data.get('format') if isinstance(data, dict) else '?'!r})")
    return data["state"]
