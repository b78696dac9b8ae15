"""Running a side of a benchmark in another process: its one ``RESULT {json}`` line back.

bench_vs_pymgrit.py and bench_vs_torchbraid.py time braidpy against a library that cannot
share braidpy's environment: its virtualenv's interpreter runs a worker (under that venv's
own mpiexec for several ranks). scaling.py and the perf benchmarks launch MPI children in
a session of their own, killed with everything they started when they overrun.
"""

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

from _harness import HERE, PREFIX, ROOT, THREAD_ENV, _read  # noqa: F401 - THREAD_ENV: theirs


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


def venv_python(env_var: str, default: Path, setup_hint: str) -> Path:
    """The interpreter of the virtualenv named by ``env_var`` (else ``default``), or exit
    with ``setup_hint`` saying how to make it."""
    venv = Path(os.environ.get(env_var, default)).expanduser()
    python = venv / "bin" / "python"
    if not python.exists():
        sys.exit(f"no virtualenv at {venv}: run `{setup_hint}` (or set {env_var})")
    return python


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


def _processes() -> Dict[int, tuple]:
    """pid -> (parent pid, session id) of every process /proc shows."""
    out = {}
    for entry in os.listdir("/proc"):
        stat = _read(f"/proc/{entry}/stat") if entry.isdigit() else None
        try:
            fields = stat.rsplit(")", 1)[1].split() if stat else []
            out[int(entry)] = (int(fields[1]), int(fields[3]))
        except (IndexError, ValueError):
            continue
    return out


def launch_tree(pid: int) -> List[int]:
    """The launch ``pid`` and every process it started: its descendants (MPICH's proxy
    starts each rank in a session of its own) and its session's processes."""
    procs = _processes()
    tree, todo = {pid}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _) in procs.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                todo.append(child)
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
        while time.perf_counter() < deadline:
            proc.poll()
            alive = [p for p in tree if os.path.exists(f"/proc/{p}") and
                     "Z" not in ((_read(f"/proc/{p}/stat") or ") Z").rsplit(")", 1)[1][:3])]
            if not alive:
                return
            time.sleep(0.05)
        tree = alive
    proc.poll()


def launch(cmd: List[str], env: Dict[str, str], timeout: float, workdir: str,
           watch: Optional[Callable[[float], Optional[str]]] = None) -> Dict[str, Any]:
    """Run ``cmd`` in a session of its own; ``watch(elapsed)`` is polled and a reason it
    returns stops the run ("stopped"); past ``timeout`` s it is killed ("timeout")."""
    out_path = os.path.join(workdir, f"launch-{time.monotonic_ns()}.out")
    start = time.perf_counter()
    with open(out_path, "w+", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=ROOT, start_new_session=True)
        status, why = "exited", None
        try:
            while True:
                try:
                    proc.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    pass
                elapsed = time.perf_counter() - start
                reason = watch(elapsed) if watch else None
                if reason:
                    status, why = "stopped", reason
                    kill_launch(proc)
                    break
                if elapsed > timeout:
                    status, why = "timeout", f"timeout: killed after {timeout:.0f} s"
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
