"""Check an App's callbacks against braidpy's contract, without running MGRIT.

:func:`check_app` is the entry point. The package is split by responsibility:

``_report``
    :data:`RULES`, :class:`CheckReport` and :class:`AppCheckError`: what a check found.
``_session``
    The state of one check and the calls into the app's callbacks (each failure of a
    callback becomes a rule failure that says which call failed and how).
``_rules``
    One function per rule (and the probe vectors they share).
``_checker``
    :func:`check_app`: validates its arguments and runs the rules in dependency order,
    skipping a rule when one it relies on failed.
``_spatial``
    :func:`check_coarsen_refine`: an app's spatial coarsening and refinement.
"""

from __future__ import annotations

from ._checker import check_app
from ._report import RESIDUAL_RULE, RULES, SPATIAL_RULES, AppCheckError, CheckReport
from ._spatial import check_coarsen_refine

__all__ = ["RESIDUAL_RULE", "RULES", "SPATIAL_RULES", "AppCheckError", "CheckReport",
           "check_app", "check_coarsen_refine"]

# Public names report the package as their home (tracebacks, reprs, pickles).
for _public in (AppCheckError, CheckReport, check_app, check_coarsen_refine):
    _public.__module__ = __name__
del _public
