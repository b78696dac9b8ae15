"""Run an ``mpiexec`` command so that a timeout ends every process it started.

``subprocess.run(cmd, timeout=...)`` kills only ``mpiexec`` itself when time runs out;
Hydra starts each rank in a session of its own, so a hung rank outlives it and keeps
its cores (and its stdout pipe: ``run`` would then wait on it forever). :func:`run_mpi`
marks every process of the launch through an environment variable and, past the
timeout, stops ``mpiexec``'s process group and kills every marked process, then raises
``subprocess.TimeoutExpired`` as ``subprocess.run`` does.
"""

import os
import signal
import subprocess
import uuid
from pathlib import Path

MARK = "BRAIDPY_TEST_LAUNCH"


def marked_pids(mark):
    """Our processes whose environment carries ``MARK=mark`` (Linux /proc)."""
    needle = f"{MARK}={mark}".encode()
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return pids


def kill_launch(proc, mark):
    """SIGTERM to mpiexec's process group (Hydra then stops its ranks), then SIGKILL to
    that group and to every process carrying our mark."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for pid in [proc.pid] + marked_pids(mark):
        try:
            os.killpg(pid, signal.SIGKILL) if pid == proc.pid else os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_mpi(cmd, *, timeout, env=None, input=None, cwd=None, capture_output=True,
            text=True):
    """``subprocess.run(cmd, ...)`` for a command that starts MPI ranks: the same
    CompletedProcess, or ``subprocess.TimeoutExpired`` once every process of the launch
    has been killed. Both carry the launch's ``mark`` (for :func:`marked_pids`)."""
    mark = uuid.uuid4().hex
    env = dict(os.environ if env is None else env, **{MARK: mark})
    pipe = subprocess.PIPE if capture_output else None
    proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.PIPE if input else None,
                            stdout=pipe, stderr=pipe, text=text, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_launch(proc, mark)
        try:  # bounded: a survivor holding the pipes must not hang the test run
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            stdout, stderr = "", ""
        expired = subprocess.TimeoutExpired(proc.args, timeout, output=stdout, stderr=stderr)
        expired.mark = mark
        raise expired
    except BaseException:  # an interrupted test run: leave nothing behind
        kill_launch(proc, mark)
        raise
    result = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    result.mark = mark
    return result
