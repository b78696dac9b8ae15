"""Runs part of a benchmark in another process and reads back its ``RESULT {json}``: another
library's side in its own virtualenv, and scaling.py's MPI launches (killed, with all they
started, when they overrun)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PREFIX = "RESULT "
#: One thread per process (the ranks' and the sidecars' machines are small and shared).
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")
THREAD_ENV = {k: "1" for k in THREAD_VARS[:3]}


def result_line(out: Any) -> None:
    """Print a worker's result for its parent (``run_for_result``, ``launch``)."""
    print(PREFIX + json.dumps(out), flush=True)


def _last_result(text: str) -> Any:
    result = None
    for line in text.splitlines():
        if line.startswith(PREFIX):
            with contextlib.suppress(ValueError):
                result = json.loads(line[len(PREFIX):])
    return result


def slowest(comm: Any, fn: Callable[[], Any]) -> tuple:
    """(wall seconds, result) of fn() started after a barrier; under MPI (``comm`` not
    None) the slowest rank's seconds."""
    if comm is not None:
        comm.Barrier()
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    if comm is not None:
        from mpi4py import MPI
        elapsed = comm.allreduce(elapsed, op=MPI.MAX)
    return elapsed, out


def venv_python(env_var: str, default: Path, setup_hint: str) -> Path:
    """The interpreter of the virtualenv named by ``env_var`` (else ``default``), or exit
    with ``setup_hint`` saying how to make it."""
    venv = Path(os.environ.get(env_var, default)).expanduser()
    if not (venv / "bin" / "python").exists():
        sys.exit(f"no virtualenv at {venv}: run `{setup_hint}` (or set {env_var})")
    return venv / "bin" / "python"


def mpiexec_for(python: Path) -> str:
    """The mpiexec beside an interpreter (same MPI as its mpi4py), else the one on PATH."""
    beside = python.parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        sys.exit("mpiexec not found: install an MPI (e.g. pip install mpich)")
    return found


def run_for_result(cmd: Sequence[str], env: Mapping[str, str], timeout: float) -> dict:
    """Run a worker; the JSON of its last ``RESULT `` line (exit with its output if it
    failed or printed none)."""
    proc = subprocess.run(list(cmd), cwd=HERE, env=dict(env), capture_output=True, text=True,
                          timeout=timeout, check=False)
    result = _last_result(proc.stdout)
    if proc.returncode != 0 or result is None:
        sys.exit(f"worker failed ({' '.join(cmd)}):\n{proc.stdout}\n{proc.stderr}")
    return result


def alternating(plan: Sequence[tuple], rounds: int, run: Callable[..., dict],
                merged: Sequence[str]) -> Dict[tuple, dict]:
    """{(*key, side): the first round's result, its ``merged`` lists extended by the later
    rounds'}: ``run(key, side, first_round)`` for every (key, sides) of ``plan``, each
    round, the sides in reverse order every other round."""
    results: Dict[tuple, dict] = {}
    for k in range(rounds):
        for key, sides in plan:
            for side in sides[::1 if k % 2 == 0 else -1]:
                print(f"round {k + 1}/{rounds}: {side} {key}", file=sys.stderr, flush=True)
                r = run(key, side, k == 0)
                old = results.setdefault((*key, side), r)
                for name in merged if old is not r else ():
                    old[name] += r[name]
    return results


def _stat(pid: int) -> List[str]:
    """The fields of /proc/PID/stat after the command name: state, ppid, pgrp, session."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def launch_tree(pid: int) -> List[int]:
    """The launch ``pid`` and every process it started: its descendants (MPICH's proxy
    starts each rank in a session of its own) and its session's processes."""
    stats = {int(p): _stat(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    procs = {p: (int(f[1]), int(f[3])) for p, f in stats.items() if len(f) > 3}
    tree, todo = {pid}, [pid]
    while todo:
        parent = todo.pop()
        children = [c for c, (ppid, _) in procs.items() if ppid == parent and c not in tree]
        tree.update(children)
        todo += children
    tree.update(p for p, (_, sid) in procs.items() if sid == pid)
    return sorted(tree)


def kill_launch(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL to what is left, to the launch and every process it started
    (found, by id, before the first signal: orphans lose their parent link)."""
    tree = launch_tree(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.perf_counter() + 3
        while tree and time.perf_counter() < deadline:
            proc.poll()
            tree = [p for p in tree if _stat(p)[:1] not in ([], ["Z"])]  # gone or zombie
            time.sleep(0.05)
    proc.poll()


def launch(cmd: List[str], env: Dict[str, str], timeout: float, workdir: str,
           watch: Optional[Callable[[float], Optional[str]]] = None) -> Dict[str, Any]:
    """Run ``cmd`` in a session of its own; ``watch(elapsed)`` is polled and a reason it
    returns stops the run ("stopped"); past ``timeout`` s it is killed ("timeout")."""
    out_path = os.path.join(workdir, f"launch-{time.monotonic_ns()}.out")
    start, status, why = time.perf_counter(), "exited", None
    with open(out_path, "w+", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=ROOT, start_new_session=True)
        try:
            while proc.poll() is None:
                time.sleep(0.1)
                elapsed = time.perf_counter() - start
                reason = watch(elapsed) if watch else None
                if reason or elapsed > timeout:
                    status, why = ("stopped", reason) if reason else (
                        "timeout", f"timeout: killed after {timeout:.0f} s")
                    kill_launch(proc)
                    break
        finally:  # interrupted (Ctrl-C, SIGTERM): the launch's own session goes too
            if proc.poll() is None:
                kill_launch(proc)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    os.unlink(out_path)
    return {"cmd": cmd, "status": status, "reason": why, "rc": proc.returncode,
            "wall_seconds": wall, "result": _last_result(text),
            "output_tail": text[-1500:] if (proc.returncode or status == "timeout") else ""}
