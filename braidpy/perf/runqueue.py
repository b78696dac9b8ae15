"""Time a process waited for a core, and which timed samples were spared that wait.

The performance model gives every rank a core of its own. On a machine shared with
other jobs a rank is now and then descheduled while runnable; its partner spins in MPI
meanwhile, so the lost time shows in the wall *and* the CPU time of a parallel run. Linux
counts the wait per task (``/proc/self/schedstat``, second field: nanoseconds runnable
but not running); a timed sample is *clean* when no rank waited more than a small
share of it, and only clean samples measure what the model predicts.

>>> clean_indices([0.1, 0.1, 0.1], [0.0, 0.005, 0.002])
[0, 2]
"""

from __future__ import annotations

from typing import List, Sequence

__all__ = ["CLEAN_SHARE", "run_delay", "clean_indices"]

#: A sample is clean when the longest run-queue wait of any rank is at most this share
#: of its wall time.
CLEAN_SHARE = 0.02


def run_delay() -> float:
    """Seconds this process has waited in the run queue so far (Linux schedstat; 0.0
    where the kernel does not say, so that every sample then counts as clean)."""
    try:
        with open("/proc/self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return 0.0


def clean_indices(walls: Sequence[float], delays: Sequence[float],
                  share: float = CLEAN_SHARE) -> List[int]:
    """Indices of the samples whose run-queue wait (the longest over the ranks) is at
    most ``share`` of their wall time."""
    if len(walls) != len(delays):
        raise ValueError(f"{len(walls)} wall times for {len(delays)} delays")
    return [i for i, (w, d) in enumerate(zip(walls, delays)) if d <= share * w]
