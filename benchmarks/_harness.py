"""What every benchmark shares: timing, A/B alternation, ratios, tables, JSON, the host
(children: another library's side in its own virtualenv, an MPI launch, are _sidecar.py's)."""

from __future__ import annotations

import datetime
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The thread-count variables host_info reports.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")

__all__ = ["Budget", "alternate", "best", "clock", "dump_json", "host_info", "microseconds",
           "min_median", "ms", "per_call", "print_host", "print_table", "ratio", "seconds",
           "times"]


def min_median(values: Iterable[float]) -> tuple[float, float]:
    """(min, median) of repeated measurements."""
    values = list(values)
    return min(values), statistics.median(values)


def clock(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, this process's CPU seconds, result) of fn() after a gc.collect()."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def times(fn: Callable[[], Any], repeats: int, sync: Optional[Callable[[], Any]] = None,
          budget: float = math.inf, collect: bool = False) -> List[float]:
    """Wall seconds of ``repeats`` calls of fn (``sync()`` before the clock stops; fewer
    calls once ``budget`` seconds are spent; ``collect``: gc.collect() before each)."""
    out: List[float] = []
    started = time.perf_counter()
    for _ in range(max(1, repeats)):
        if collect:
            gc.collect()
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        out.append(time.perf_counter() - start)
        if time.perf_counter() - started > budget:
            break
    return out


def best(fn: Callable[[], Any], repeats: int, **kw: Any) -> float:
    """Min wall seconds over ``repeats`` calls of fn (``times``' options)."""
    return min(times(fn, repeats, **kw))


def per_call(fn: Callable[[], Any], calls: int) -> float:
    """Mean seconds of one call over ``calls`` back-to-back calls (timeit's loop)."""
    return timeit.timeit(fn, number=calls) / calls


def alternate(fns: Mapping[str, Callable[[], Any]], rounds: int,
              measure: Optional[Callable[[Callable[[], Any]], float]] = None
              ) -> Dict[str, List[float]]:
    """A/B/A/B: each round calls every fn once, in turn, so that a machine's drift falls
    on all alike. {name: seconds per round}."""
    measure = measure or (lambda fn: times(fn, 1)[0])
    out: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            out[name].append(measure(fn))
    return out


def ratio(a: Any, b: Any, digits: int = 2) -> str:
    """a / b as 'r.rrx'; for lists of times 'min ratio (median ratio)'."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return f"{a / b:.{digits}f}x"
    (lo, med), (r_lo, r_med) = min_median(a), min_median(b)
    return f"{lo / r_lo:.{digits}f}x ({med / r_med:.{digits}f}x)"


def seconds(value: float) -> str:
    return f"{value * 1e3:.2f} ms" if value < 0.1 else f"{value:.3f} s"


def microseconds(value: float) -> str:
    return f"{value * 1e6:.3f} us"


def ms(values: Any, digits: int = 2) -> str:
    """Milliseconds: a number, or 'min (median)' of a list of times; None as '-'."""
    if values is None:
        return "-"
    if isinstance(values, (int, float)):
        return f"{values * 1e3:.{digits}f}"
    lo, med = min_median(values)
    return f"{lo * 1e3:.{digits}f} ({med * 1e3:.{digits}f})"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str = "") -> None:
    """Print rows under headers, columns padded to their widest cell (first left, rest right)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if title:
        print(title)
    for k, row in enumerate(cells):
        print("  ".join([row[0].ljust(widths[0])]
                        + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    print()


def dump_json(path: Optional[str], payload: Dict[str, Any], host: bool = True) -> None:
    """Write payload (with the host under "host" unless it has one) as JSON; no path: nothing."""
    if not path:
        return
    if host and "host" not in payload:
        payload = {**payload, "host": host_info(mpi=False)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, default=str)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return ""


def _run_text(cmd: Sequence[str], timeout: float = 20) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return (p.stdout + p.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"({exc})"


def cpu_info() -> Dict[str, Any]:
    """Cores this process may use (affinity, /proc/cpuinfo, cgroup quota), CPU model."""
    logical = os.cpu_count() or 1
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else list(range(logical))
    out: Dict[str, Any] = {"logical": logical, "affinity": len(usable)}
    cores, model = {}, None
    for block in _read("/proc/cpuinfo").split("\n\n"):
        fields = {k.strip(): v.strip() for k, _, v in
                  (ln.partition(":") for ln in block.splitlines() if ":" in ln)}
        if "processor" in fields:
            model = model or fields.get("model name") or fields.get("Model")
            if "core id" in fields:
                cores[int(fields["processor"])] = (fields.get("physical id", "0"),
                                                   fields["core id"])
    out["model"] = model or platform.processor() or "?"
    out["physical"] = len({cores[c] for c in usable if c in cores}) or len(usable)
    out["physical_source"] = ("/proc/cpuinfo (physical id, core id) of the affinity set"
                              if cores else
                              "unknown: /proc/cpuinfo has no core ids; affinity count")
    quota = _read("/sys/fs/cgroup/cpu.max").split()
    if len(quota) == 2 and quota[0] != "max":
        out["cgroup_quota_cores"] = int(quota[0]) / int(quota[1])
    out["cores_for_ranks"] = max(1, min(out["physical"], int(out.get(
        "cgroup_quota_cores", out["physical"]))))
    out["loadavg"] = (_read("/proc/loadavg") or "?").split()[:3]
    return out


def find_mpiexec() -> Optional[str]:
    """$BRAIDPY_MPIEXEC, else the mpiexec beside this interpreter, else PATH's."""
    if os.environ.get("BRAIDPY_MPIEXEC"):
        return os.environ["BRAIDPY_MPIEXEC"]
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else shutil.which("mpiexec")


def mpi_info(mpiexec: Optional[str]) -> Dict[str, Any]:
    """MPI as mpi4py sees it (a child process, no MPI_Init) and the launcher's version."""
    code = ("import json, mpi4py; mpi4py.rc.initialize = False; mpi4py.rc.finalize = False\n"
            "from mpi4py import MPI\n"
            "print(json.dumps({'mpi4py': mpi4py.__version__, "
            "'library': MPI.Get_library_version().strip(), 'standard': MPI.Get_version()}))")
    out: Dict[str, Any] = {"mpiexec": mpiexec}
    text = _run_text([sys.executable, "-c", code])
    try:
        out.update(json.loads(text.splitlines()[-1]))
    except (ValueError, IndexError):
        out["error"] = f"mpi4py: {text[-300:]}"
    lib = out.get("library", "")
    out["implementation"] = ("Open MPI" if "Open MPI" in lib else "MPICH" if "MPICH" in lib
                             else "Intel MPI" if "Intel" in lib else lib.split("\n")[0][:40]
                             or "?")
    out["library_first_line"] = " ".join(lib.splitlines()[0].split()) if lib else None
    if mpiexec:
        out["mpiexec_version"] = " ".join(" ".join(
            _run_text([mpiexec, "--version"]).splitlines()[:2]).split())
    return out


def blas_info() -> Dict[str, Any]:
    """NumPy's BLAS and its threads (threadpoolctl if installed), the thread variables."""
    import numpy  # noqa: F401 - its BLAS loaded, for threadpoolctl

    out: Dict[str, Any] = {"env": {k: os.environ.get(k) for k in THREAD_VARS}}
    try:
        from threadpoolctl import threadpool_info

        keys = ("user_api", "internal_api", "num_threads", "version")
        out["threadpools"] = [{k: p.get(k) for k in keys} for p in threadpool_info()]
    except ImportError:
        out["threadpools"] = "threadpoolctl not installed"
    return out


def git_info() -> Dict[str, Any]:
    """The checkout's commit, and whether tracked files differ from it (read-only)."""
    head = _run_text(["git", "-C", str(ROOT), "rev-parse", "HEAD"])
    try:
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(ROOT), "diff",
                                "--quiet", "HEAD", "--"], capture_output=True,
                               timeout=20).returncode
    except (OSError, subprocess.SubprocessError):
        dirty = None
    return {"commit": head if len(head) == 40 else None,
            "tracked_changes": None if dirty is None else bool(dirty)}


def host_info(mpiexec: Optional[str] = None, mpi: bool = True) -> Dict[str, Any]:
    """Date, host, CPU (model, cores), MPI (``mpi``), BLAS, Python/NumPy/braidpy, commit."""
    import numpy as np

    try:
        from braidpy import __version__ as version
    except ImportError:
        version = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(), "platform": platform.platform(), "cpu": cpu_info(),
        "mpi": mpi_info(mpiexec or find_mpiexec()) if mpi else None, "blas": blas_info(),
        "python": platform.python_version(), "numpy": np.__version__, "braidpy": version,
        "git": git_info(),
    }


def print_host(host: Dict[str, Any], child_env: Optional[Dict[str, str]] = None) -> None:
    c, m, b = host["cpu"], host.get("mpi"), host["blas"]
    quota = c.get("cgroup_quota_cores")
    print(f"host {host['hostname']}, {host['date']}; {host['platform']}")
    print(f"  cpu: {c['model']}; {c['logical']} logical cores, {c['affinity']} in this "
          f"process's affinity, {c['physical']} physical ({c['physical_source']})"
          + (f", cgroup quota {quota:.1f} cores" if quota else "")
          + f"; load {' '.join(c['loadavg'])}")
    if m:
        print(f"  MPI: {m['implementation']} ({m.get('library_first_line') or m.get('error')})"
              f"; mpi4py {m.get('mpi4py', '-')}; mpiexec {m['mpiexec']} "
              f"({m.get('mpiexec_version', '-')})")
    pools = b["threadpools"]
    pools = pools if isinstance(pools, str) else ", ".join(
        f"{p['internal_api']} {p['version']} {p['num_threads']} threads" for p in pools)
    env = ", ".join(f"{k}={v}" for k, v in b["env"].items() if v is not None) or "none set"
    print(f"  BLAS here: {pools}; thread variables found: {env}")
    print(f"  Python {host['python']}, NumPy {host['numpy']}, braidpy {host['braidpy']}; "
          f"git {host['git']['commit']}"
          + (" + uncommitted changes" if host["git"]["tracked_changes"] else ""))
    if child_env:
        print(f"  every launch runs with {', '.join(f'{k}={v}' for k, v in child_env.items())}"
              f": one core per rank; ranks are not pinned (the MPI launcher's default binding)")


class Budget:
    """Seconds left of a --budget (0 or None: no limit) since it was made."""

    def __init__(self, seconds: Optional[float], safety: float = 1.0):
        self.total, self.safety = seconds or 0, safety
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return self.total

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self, share: float = 1.0) -> float:
        return math.inf if not self.total else share * self.total - self.elapsed()

    def factor(self, remaining_estimate: float) -> float:
        """Seconds left per estimated second of the work still to come (inf: no budget)."""
        if not self.total:
            return math.inf
        return max(self.left(), 0.0) / max(remaining_estimate, 1e-9)

    def refuses(self, need: float, share: float = 1.0) -> Optional[str]:
        """Why a part estimated at ``need`` seconds may not start, or None."""
        left = self.left(share)
        if need * self.safety <= left:
            return None
        return (f"estimated {need * self.safety:.1f} s (with x{self.safety:g} margin) > "
                f"{max(left, 0):.1f} s left of --budget {self.total:g} s"
                + (f" (the per-call pass may use {share:.0%})" if share < 1 else ""))
