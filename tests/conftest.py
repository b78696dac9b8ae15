import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

# The MPI tests run 4 ranks on CI's 2 cores. MPICH's ranks busy-poll while they wait, so
# a waiting rank burns the time slice its sender needs; its progress throttle makes a
# rank that sees no progress yield its core instead (every mpiexec the tests start
# inherits this; Open MPI ignores MPICH's variables). 49 s -> 28 s for the space, MPI,
# spatial and torch-MPI tests on the 2-core VM; docs/performance.md has the same for runs.
import os  # noqa: E402

os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "1")
