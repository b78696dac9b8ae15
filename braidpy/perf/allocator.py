"""Keep freed memory in the process: glibc's allocator tuned so that large temporaries
are reused instead of returned to the kernel and faulted in again.

NumPy takes every array above a few hundred KiB from ``malloc``. glibc serves such a
request with a fresh ``mmap`` (or trims the heap when it is freed) depending on a
threshold that it moves with the process's history, so the same batched layer call
costs 1x or 2x depending on what the process did before: on this project's 2-core VM
a dense width-8 call over 4-64 rows of 1000 samples took 75-95 us per row of user time
plus 55-65 us per row of *system* time (page faults zeroing the temporaries' pages)
when glibc returned its temporaries, and no system time when it kept them; inside a
solve the same calls hit either regime. That made ``braidpy calibrate``'s isolated calls
and a real gradient disagree by up to 40 % (docs/performance.md, "Validation").

:func:`keep_freed_memory` fixes the thresholds (``mallopt``; the same as the
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment variables) so
that both see the fast regime. The price is that freed memory stays with the process
(its peak, not more). Elsewhere than glibc it does nothing and says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Dict, Optional, Tuple

__all__ = ["keep_freed_memory", "M_TRIM_THRESHOLD", "M_MMAP_THRESHOLD", "MMAP_LIMIT"]

#: glibc's mallopt parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Requests above this still get their own mmap (glibc caps the threshold at 32 MiB
#: on 64-bit hosts in older versions): a 4 GiB state is not kept after it is freed.
MMAP_LIMIT = 32 * 2 ** 20

_state: Dict[str, Optional[Tuple[bool, str]]] = {"done": None}


def keep_freed_memory(trim_bytes: int = 2 ** 30, mmap_bytes: int = MMAP_LIMIT
                      ) -> Tuple[bool, str]:
    """Set glibc's trim and mmap thresholds (once per process); (applied, what was done).

    Honours thresholds already set by the environment (``MALLOC_TRIM_THRESHOLD_``,
    ``MALLOC_MMAP_THRESHOLD_``): then nothing is changed."""
    done = _state["done"]
    if done is not None:
        return done
    import os

    if "MALLOC_TRIM_THRESHOLD_" in os.environ or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        out = (False, "left to MALLOC_*_THRESHOLD_ from the environment")
    else:
        out = _mallopt(trim_bytes, mmap_bytes)
    _state["done"] = out
    return out


def _mallopt(trim_bytes: int, mmap_bytes: int) -> Tuple[bool, str]:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as exc:
        return False, f"not applied: no glibc mallopt ({exc})"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not (mallopt(M_TRIM_THRESHOLD, int(trim_bytes)) and
            mallopt(M_MMAP_THRESHOLD, int(mmap_bytes))):
        return False, "not applied: mallopt refused the thresholds"
    return True, f"glibc trim threshold {trim_bytes} B, mmap threshold {mmap_bytes} B"
