"""Checks for code started under mpiexec: the ranks really run together, and the work
really is split among them.

An ``mpiexec`` stand-in that starts N unconnected single-process copies of a driver
would otherwise pass every "same result at 2 and 4 ranks" test: each copy solves the
whole problem serially and writes the serial answer. So every driver takes the rank
count its test launched it with and calls :func:`expect_world` first, and the case
tables call :func:`assert_split` on what each rank owns.
"""

import os

ENV = "BRAIDPY_TEST_NRANKS"


def expect_world(comm, nranks):
    """Fail unless ``comm`` has exactly ``nranks`` ranks (the count given to mpiexec)."""
    nranks = int(nranks)
    size = comm.Get_size()
    if size != nranks:
        raise AssertionError(
            f"launched as {nranks} ranks but this process's MPI_COMM_WORLD has {size}: "
            f"the copies are not connected by MPI")
    os.environ[ENV] = str(nranks)  # seen by assert_split in the case tables
    return nranks


def assert_split(comm, owned, total, what="time points"):
    """The ranks' ``owned`` index sets are disjoint, cover ``range(total)``, and with
    more than one rank none holds all of them (the work was really divided).

    A no-op serially (``comm`` None). Collective: every rank must call it.
    """
    if comm is None:
        return
    size = comm.Get_size()
    expected = os.environ.get(ENV)
    if expected is not None and int(expected) != size:
        raise AssertionError(f"{size} ranks in the communicator, {expected} launched")
    parts = comm.allgather(sorted(int(i) for i in owned))
    flat = [i for p in parts for i in p]
    if len(flat) != len(set(flat)):
        raise AssertionError(f"{what}: ranks overlap: {parts}")
    if sorted(flat) != list(range(total)):
        raise AssertionError(f"{what}: the ranks together hold {len(set(flat))} of {total}")
    if size > 1 and max(len(p) for p in parts) >= total:
        raise AssertionError(f"{what}: one of {size} ranks holds all {total}")
