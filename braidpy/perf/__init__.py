"""Performance model and strategy chooser for layer-parallel training.

Modules, one job each: :mod:`~braidpy.perf.calibration`, the calibration file (versioned
JSON, validated on loading); :mod:`~braidpy.perf.calibrate`, measuring it
(``braidpy calibrate``); :mod:`~braidpy.perf.schedule`, the task graph of MGRIT solves
rank by rank and its critical path; :mod:`~braidpy.perf.model`, time and memory per
gradient on a data x space x layers grid; :mod:`~braidpy.perf.plan`, ranking every grid
and MGRIT setting (``braidpy plan``); :mod:`~braidpy.perf.allocator`, glibc's
allocator set to keep freed memory (the regime the calibration measures). See
docs/performance.md.
"""

from __future__ import annotations

from .allocator import keep_freed_memory
from .calibration import (
    Calibration,
    CalibrationError,
    CostFit,
    LayerCosts,
    Link,
    load_calibration,
    save_calibration,
)
from .model import (NETWORKS, NetSpec, Prediction, Strategy, band_share, network_spec, predict,
                    serial_seconds)
from .plan import CLUSTERS, Plan, factorizations, format_plan, plan
from .schedule import Cycle, Event, Op, Timeline, hierarchy, program_counts, simulate, solve_program

__all__ = ["Calibration", "CalibrationError", "CostFit", "LayerCosts", "Link",
           "load_calibration", "save_calibration", "NETWORKS", "NetSpec", "Prediction",
           "Strategy", "network_spec", "predict", "serial_seconds", "band_share", "CLUSTERS",
           "Plan",
           "factorizations", "format_plan", "plan", "Cycle", "Event", "Op", "Timeline", "hierarchy",
           "program_counts", "simulate", "solve_program", "keep_freed_memory"]
