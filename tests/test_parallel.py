"""braidpy.parallel: typed collectives and the agreement, at 1, 2 and 4 ranks."""

import numpy as np
import pytest
from apps import Decay
from test_mpi import run_driver

import braidpy
from braidpy.parallel import agreed, rank_size
from braidpy.parallel.layers import check_ranges, mirrored_ranges


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_collectives_under_mpi(nranks, tmp_path):
    res = run_driver(nranks, "parallel", tmp_path)
    assert res["size"] == nranks  # the ranks really ran together
    assert res["texts"] == [None if r == 1 else f"rang {r} é" for r in range(nranks)]
    values, index = res["gathered_terms"]
    assert index == [k for r in range(nranks) for k in range(r)]
    assert values == [0.1 * k for r in range(nranks) for k in range(r)]
    total, bitwise = res["ordered_sum"]
    assert bitwise, total
    assert res["scalar_sum"] == [[], sum(0.5 * r for r in range(nranks))]
    assert res["held_sum"] == ([3.0, 2e16] if nranks > 1 else [1.0, 1e16]) * nranks
    arrays = res["gathered_arrays"]
    assert sorted(arrays, key=int) == [str(k) for k in
                                       sorted([10 + r for r in range(nranks)] +
                                              [100 + r for r in range(nranks)])]
    for r in range(nranks):
        assert arrays[str(10 + r)] == ["float64", [2, 3], [float(r)] * 6]
        assert arrays[str(100 + r)] == ["int64", [r], list(range(r))]
    assert bytes.fromhex(res["broadcast"]) == b"\x00payload\xff"
    assert res["agreement_when_fine"] == [["ok", ""]] * nranks
    # the core's test of open sends completes them once the receiver took them
    assert res["sends_advanced"] == [[True, True]] * nranks


@pytest.mark.parametrize("nranks", [2, 4])
def test_agreement_and_forged_headers_under_mpi(nranks, tmp_path):
    res = run_driver(nranks, "parallel", tmp_path)
    fail = nranks - 1
    outcomes = res["agreement_on_failure"]
    assert outcomes[fail] == ["Boom", "failed on purpose"]
    for rank, (kind, msg) in enumerate(outcomes):
        if rank != fail:
            assert kind == "BraidError", outcomes
            assert f"rank {fail}: Boom: failed on purpose" in msg and "the test block" in msg
    forged = res["forged_headers"]
    assert len(forged) == 6
    for kind, msg in forged:
        assert kind == "ValueError" and "braidpy message" in msg, forged


def test_serial_agreement_reraises_the_original():
    class Boom(RuntimeError):
        pass

    with pytest.raises(Boom) as info:
        with agreed(None, "a block"):
            raise Boom("x")
    assert not getattr(info.value, "__notes__", None)  # one rank: nothing to add


def test_rank_size_rejects_non_communicators():
    assert rank_size(None) == (0, 1)
    with pytest.raises(TypeError, match="got int"):
        rank_size(3)
    with pytest.raises(TypeError, match="mpi4py communicator"):
        braidpy.solve(Decay(), 0.0, 1.0, 4, comm="world")


def test_ownership_ranges_are_checked():
    assert mirrored_ranges([(0, 3), (4, 8)], 8) == [(0, 4), (5, 8)]
    assert check_ranges([(0, 4), (5, 4), (5, 8)], 8, 3) == [(0, 4), (5, 4), (5, 8)]
    for ranges, match in (([(0, 8)], "1 ranges for 2"), ([(1, 3), (4, 8)], "rank 0 starts at 1"),
                          ([(0, 3), (4, 7)], "end at 7"), ([(0, 3), (4, 2)], r"rank 1 has")):
        with pytest.raises(ValueError, match=match):
            check_ranges(ranges, 8, 2)


def test_no_pickle_based_mpi_calls_in_braidpy():
    """Every message braidpy sends is a typed buffer: mpi4py's lowercase (pickling)
    calls never appear in the package."""
    import re
    from pathlib import Path

    root = Path(braidpy.__file__).parent
    lowercase = re.compile(r"\.(bcast|allgather|gather|scatter|send|recv|isend|irecv|"
                           r"allreduce|sendrecv|reduce|alltoall)\(")
    hits = [f"{p.relative_to(root)}:{n}: {line.strip()}"
            for p in root.rglob("*.py") for n, line in enumerate(p.read_text().splitlines(), 1)
            if lowercase.search(line)]
    assert hits == [], hits


def test_ordered_sum_is_left_to_right():
    from braidpy.parallel.collectives import ordered_sum

    items = [np.array([1e16]), np.array([1.0]), np.array([-1e16])]
    assert ordered_sum(items, None)[0] == (1e16 + 1.0) - 1e16
    assert ordered_sum([], None) is None
    with pytest.raises(ValueError, match="holders must be an int >= 1, got 0"):
        ordered_sum(items, None, holders=0)
