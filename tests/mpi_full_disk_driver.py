"""``braidpy train`` under mpiexec with a file size limit (test_cli_full_disk_mpi.py).

    mpiexec -n P python tests/mpi_full_disk_driver.py P OUT_DIR LIMIT train ...

MPI starts first (a file size limit set before, as ``ulimit -f`` does, breaks MPICH's
start-up), then every rank limits its files to LIMIT bytes with SIGXFSZ ignored, so a
write past it fails with EFBIG as a full disk's write fails with ENOSPC. The command
line's own ``main`` runs the rest; each rank writes OUT_DIR/rank<r>.json with the
status ``main`` returned and the error that ended its command (what rank 0 prints),
then exits with that status.
"""

import json
import resource
import signal
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from mpi4py import MPI  # noqa: E402 - MPI starts before the limit

from braidpy import cli  # noqa: E402

COMM = MPI.COMM_WORLD


def main():
    from mpi_world import expect_world
    expect_world(COMM, sys.argv[1])
    out_dir, limit, argv = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    errors = []
    run_command = cli._run_command

    def recorded(args, argv):  # the command's own error, before main reports it
        try:
            return run_command(args, argv)
        except BaseException as exc:  # noqa: BLE001 - recorded, then main's as ever
            errors.append(cli._describe(exc))
            raise

    cli._run_command = recorded
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        status = cli.main(argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    (out_dir / f"rank{COMM.Get_rank()}.json").write_text(
        json.dumps({"status": status, "errors": errors, "size": COMM.Get_size()}))
    sys.exit(status)


if __name__ == "__main__":
    main()
