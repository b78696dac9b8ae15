"""The collectives of one Core.solve under mpiexec -n 1, 2, 4 (counted by kind on the
Core's own communicator), and a failure packing the final value on the rank that holds
it: raised there, BraidError naming it on every other rank, and the Core solves again.

Every collective is one latency on every rank (one scheduler wake-up each when ranks
outnumber cores), so a change that adds one to every solve shows here.
"""

import pytest
from mpi_launch import launch

NTIME = 96  # as in mpi_collectives_driver.py
# Per solve, beside the MGRIT cycle's own reductions: the entry agreement (an
# allgather), the final value's holder/length allgather and its broadcast, and the
# agreement on unpacking it (an allgather).
OWN = {"allgather": 3, "bcast": 1}
# The MGRIT cycle's residual-norm reductions of this problem: a cold solve of 8
# iterations, a warm one of 1 (the same at any rank count).
REDUCTIONS = {"cold": 10, "warm": 3, "cold_again": 10}


@pytest.fixture(scope="module", params=[1, 2, 4])
def run(request, tmp_path_factory):
    nranks = request.param
    res = launch("mpi_collectives_driver.py", nranks, tmp_path_factory.mktemp("coll"))
    assert res["nranks"] == nranks and len(res["ranks"]) == nranks
    for r, out in enumerate(res["ranks"]):
        for part in out.values():
            assert "crashed" not in part, f"rank {r}: {part.get('crashed')}"
    return nranks, res["ranks"]


def test_the_ranks_shared_the_time_points(run):
    nranks, ranks = run
    owned = [set(out["counts"]["cold"]["owned"]) for out in ranks]
    assert set().union(*owned) == set(range(NTIME + 1))
    assert sum(len(o) for o in owned) == NTIME + 1  # disjoint
    assert all(owned) and (nranks == 1 or all(len(o) < NTIME + 1 for o in owned))


@pytest.mark.parametrize("solve", sorted(REDUCTIONS))
def test_the_collectives_of_one_solve(run, solve):
    nranks, ranks = run
    for r, out in enumerate(ranks):
        got = out["counts"][solve]
        if nranks == 1:
            assert got["calls"] == {}, got  # serially nothing is exchanged
            continue
        assert got["calls"] == dict(OWN, allreduce=REDUCTIONS[solve]), (r, solve, got)
        assert got["iterations"] == (1 if solve == "warm" else 8), got
    finals = {tuple(out["counts"][solve]["final"]) for out in ranks}
    assert len(finals) == 1  # the final value on every rank, bit for bit


def test_a_failure_packing_the_final_value_stops_every_rank(run):
    nranks, ranks = run
    holders = [r for r, out in enumerate(ranks) if out["failing_pack"]["holder"]]
    assert holders == [nranks - 1]
    expected = ranks[0]["failing_pack"]["expected"]
    if nranks == 1:  # serially the final value is cloned, never packed
        assert ranks[0]["failing_pack"]["packs"] == 0
        assert ranks[0]["failing_pack"]["first"] == ["ok", expected]
        return
    # The holder (the last rank) sends no message in a solve: its one bufpack call
    # packs the final value, so the failure planted there is in that packing.
    assert ranks[-1]["failing_pack"]["packs"] == 1
    for r, out in enumerate(ranks):
        first, again = out["failing_pack"]["first"], out["failing_pack"]["again"]
        if r == nranks - 1:
            assert first[0] == "ZeroDivisionError", first
            assert "failed on purpose" in first[1], first
            assert first[2] == [f"braidpy: raised in packing the final value on rank "
                                f"{r} of {nranks}; all ranks stopped"], first
        else:
            assert first[0] == "BraidError", first
            assert first[1].startswith(
                f"packing the final value failed on another rank (rank {nranks - 1}: "
                f"ZeroDivisionError: bufpack call "), first
        assert again == ["ok", expected], (r, again)  # nothing left behind
