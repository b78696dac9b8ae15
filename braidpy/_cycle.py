"""XBraid's cycle file (``braid.out.cycle``, written by braid_Drive at file I/O level 1):
one line per pass of XBraid's cycle loop, ``level nrefine iter gupper rnorm tol``.

braidpy's solve runs the same cycles (docs/conventions.md), so the lines follow from
the cycle type, the level count and the residual history: this module replays XBraid's
cycle state machine (braid/drive.c: down/up, the F-cycle's level and V-cycle count, the
top-of-cycle convergence check) after the solve.
"""

from __future__ import annotations

from typing import Dict, List, Optional

__all__ = ["cycle_lines"]


def cycle_lines(*, nlevels: int, iterations: int, ntime: int, skipped: bool, fmg: bool,
                nfmg: int, fmg_vcycles: int, residuals: Dict[int, float], abs_tol: float,
                rel_tol: float) -> List[str]:
    """The cycle file's lines of one solve. ``residuals``: r_k by iteration k (the norm
    the halting test uses); ``skipped``: the first down-sweep was skipped."""
    first_k = 1 if skipped and nlevels > 1 else 0  # XBraid's rnorm0: r_0, or r_1 after a skip

    def line(level: int, k: int, r: float, known: bool) -> str:
        tol = abs_tol
        if rel_tol > 0:  # XBraid prints tol * rnorm0, -1 for rnorm0 while unknown
            tol = rel_tol * (residuals.get(first_k, -1.0) if known else -1.0)
        return "%d 0 %d %d %1.15e %1.15e" % (level, k, ntime, r, tol)

    out: List[str] = []
    if nlevels == 1:  # sequential solve: one pass per iteration, its norm already set
        return [line(0, k, residuals.get(k, -1.0), True) for k in range(iterations)]
    down, try_refine, fmg_vcyc = True, False, 0
    fmglevel = nlevels - 1 if fmg and nfmg != 0 else 0
    level = nlevels - 1 if skipped else 0
    k, restricted = 0, False
    while k < iterations:
        r = residuals.get(k, -1.0) if restricted else -1.0
        # the cycle state update at the top of each pass
        if down and level == nlevels - 1:
            down = False
        if not down:
            if level > 0:
                if level < fmglevel:
                    fmg_vcyc += 1
                    if fmg_vcyc == fmg_vcycles:
                        fmg_vcyc = 0
                        fmglevel -= 1
                    down = True
            elif not try_refine:
                try_refine = True
            else:
                if fmg and nfmg != k:
                    fmglevel = nlevels - 1
                try_refine = False
                down = True
        known = k > first_k or (k == first_k and restricted)
        out.append(line(level, k, r, known))
        # the pass itself
        if down:
            restricted = restricted or level == 0
            level += 1
        elif level > 0:
            level -= 1
        else:  # top of the cycle: the convergence check, then the next iteration
            k += 1
            restricted = False
    return out
