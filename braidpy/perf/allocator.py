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
and a real gradient disagree by up to 40 % (docs/performance.md, "Practical advice").

:func:`keep_freed_memory` fixes the thresholds (``mallopt``; the same as the
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` environment variables) so
that both see the fast regime, and turns off the mmap of single requests
(``M_MMAP_MAX`` 0, as ``MALLOC_MMAP_MAX_=0``): glibc caps the mmap threshold at
32 MiB, and every block above it (a deep network's stacked states: 256 intervals of
5000 x 8 samples are 82 MB) was mapped afresh and faulted in page by page each time,
about 11,000 page faults and a fifth of a one-shot step at Peaks 1024 with 5000
samples. The price is that freed memory stays with the process: its peak, plus
whatever the heap cannot reuse, less what is freed at the heap's top beyond the trim
threshold. Elsewhere than glibc it does nothing and says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Dict, Optional, Tuple

__all__ = ["keep_freed_memory", "M_TRIM_THRESHOLD", "M_MMAP_THRESHOLD", "M_MMAP_MAX",
           "MMAP_LIMIT"]

#: glibc's mallopt parameter numbers (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
#: The highest mmap threshold glibc accepts on 64-bit hosts (HEAP_MAX_SIZE / 2);
#: larger requests are kept from mmap by M_MMAP_MAX instead.
MMAP_LIMIT = 32 * 2 ** 20
#: The environment variables that set what keep_freed_memory would.
_ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_")

_state: Dict[str, Optional[Tuple[bool, str]]] = {"done": None}


def keep_freed_memory(trim_bytes: int = 2 ** 30, mmap_bytes: int = MMAP_LIMIT,
                      mmap_max: Optional[int] = 0) -> Tuple[bool, str]:
    """Set glibc's trim and mmap thresholds and the number of requests it may mmap on
    their own (``mmap_max``: 0, none; None leaves glibc's), once per process;
    (applied, what was done).

    Honours settings already made by the environment (``MALLOC_TRIM_THRESHOLD_``,
    ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_MMAP_MAX_``): then nothing is changed."""
    done = _state["done"]
    if done is not None:
        return done
    import os

    given = [name for name in _ENVIRONMENT if name in os.environ]
    if given:
        out = (False, f"left to {', '.join(given)} from the environment")
    else:
        out = _mallopt(trim_bytes, mmap_bytes, mmap_max)
    _state["done"] = out
    return out


def _mallopt(trim_bytes: int, mmap_bytes: int, mmap_max: Optional[int]
             ) -> Tuple[bool, str]:
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
    what = f"glibc trim threshold {trim_bytes} B, mmap threshold {mmap_bytes} B"
    if mmap_max is None:
        return True, what
    if not mallopt(M_MMAP_MAX, int(mmap_max)):
        return True, what + f" (mallopt refused mmap max {mmap_max})"
    return True, what + f", mmap max {mmap_max}"
