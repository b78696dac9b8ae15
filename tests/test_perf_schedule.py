"""braidpy.perf.schedule: the MGRIT task graph, counted against real solves and timed by
hand on small hierarchies (unit step costs; no clocks are read)."""

import pytest

from braidpy.perf.schedule import (Cycle, Op, block_ranges, hierarchy, program_counts,
                                   simulate, solve_program)
from mpi_launch import launch
from perf_cases import CASES, model_calls, model_counts, run_counts


def unit(op):
    """Every step call costs 1 (batched: 1 per call), vector operations nothing."""
    return 1.0 if op.kind == "step" else 0.0


def run(cycle, nranks, iterations, *, latency=0.0, reduce=0.0, cold=True, ranges=None):
    progs = solve_program(cycle, nranks, iterations, cold=cold, ranges=ranges)
    return simulate(progs, unit, lambda op: latency, lambda op, n: reduce)


# ------------------------------------------------------------- the hierarchy
def test_levels_follow_xbraids_coarsening_rule():
    assert [lv.n for lv in hierarchy(Cycle(ntime=1024, max_levels=30, cfactor=4), 1)] == \
        [1024, 256, 64, 16, 4]
    assert len(hierarchy(Cycle(ntime=1024, max_levels=30, cfactor=2), 1)) == 10
    assert len(hierarchy(Cycle(ntime=1000, max_levels=3, cfactor=3), 1)) == 3
    assert len(hierarchy(Cycle(ntime=10, max_levels=2, cfactor=2), 1)) == 2
    levels = hierarchy(Cycle(ntime=8, max_levels=2, cfactor=2), 2)
    assert levels[0].ranges == [(0, 4), (5, 8)]
    assert levels[1].ranges == [(0, 2), (3, 4)]
    assert levels[1].cf == 5  # the coarsest level: only point 0 is a C-point


def test_block_ranges_give_the_remainder_to_the_first_ranks():
    assert block_ranges(9, 4) == [(0, 2), (3, 4), (5, 6), (7, 8)]


# ------------------------------------------------ critical paths by hand
def test_one_rank_two_levels():
    # FCF 8 + F to the C-points 8 + coarse tau steps 4, coarse solve 4, final F 4.
    assert run(Cycle(ntime=8, max_levels=2, cfactor=2), 1, 1).makespan == 28
    # skip: no down-sweep in iteration 0: coarse solve 4 + final F 4.
    assert run(Cycle(ntime=8, max_levels=2, cfactor=2, skip=True), 1, 1).makespan == 8
    # skip, 2 iterations: 4 + a full cycle 24 + final 4.
    assert run(Cycle(ntime=8, max_levels=2, cfactor=2, skip=True), 1, 2).makespan == 32


def test_one_rank_three_levels():
    # Level 0: 8 + 8 + 4 coarse; level 1 (n 4): FCF 4 + F 4 + 2 coarse; coarsest (n 2)
    # solve 2; level 1 F-points 2; final F 4.
    assert run(Cycle(ntime=8, max_levels=3, cfactor=2), 1, 1).makespan == 38
    # skip: coarsest 2 + level 1 F-points 2 + final 4.
    assert run(Cycle(ntime=8, max_levels=3, cfactor=2, skip=True), 1, 1).makespan == 8


def test_two_ranks_two_levels():
    # Rank 0 owns 0..4, rank 1 5..8. Each FC sweep: 4 steps on each rank in parallel (8);
    # coarse tau steps 2 each (10); the coarse solve is a relay: 2 steps on rank 0, then
    # 2 on rank 1 (14); final F-sweep 2 each (16).
    cyc = Cycle(ntime=8, max_levels=2, cfactor=2)
    tl = run(cyc, 2, 1)
    assert tl.makespan == 16
    assert tl.finish == [16, 16]  # the allreduce at the end holds everyone
    # With a message latency of 1: relax 4, restrict 8 (the boundary came early), coarse
    # 10 (rank 1 waits for v_2 until 9), coarse solve 12 + 1 + 2 = 15, final 15 + 1 + 2.
    assert run(cyc, 2, 1, latency=1.0).makespan == 18
    # An allreduce costing 5: one after the initial guess, one per iteration, one after
    # the final sweep.
    assert run(cyc, 2, 1, reduce=5.0).makespan == 16 + 15


def test_two_ranks_with_skip():
    # Coarse solve relay 2 + 2, final F-sweep 2.
    assert run(Cycle(ntime=8, max_levels=2, cfactor=2, skip=True), 2, 1).makespan == 6


def test_four_ranks_with_skip():
    # Coarse points 0..4 on ranks (0,1), (2), (3), (4): a relay of 1 + 1 + 1 + 1 steps;
    # then one F-step on every rank.
    cyc = Cycle(ntime=8, max_levels=2, cfactor=2, skip=True)
    assert run(cyc, 4, 1).makespan == 5
    # Latency 1 per message: 1 (+1) 1 (+1) 1 (+1) 1 = 7; final: receive at 8, step: 9.
    assert run(cyc, 4, 1, latency=1.0).makespan == 9


def test_three_ranks_three_levels_counts_add_up():
    cyc = Cycle(ntime=8, max_levels=3, cfactor=2)
    progs = solve_program(cyc, 3, 1, cold=True)
    # The one-rank total, plus one: in the final sweep rank 1 (points 3..5) steps the
    # interval 4 -> 5 ahead for its right neighbour and once more in order (drive.cpp).
    assert sum(program_counts(p)["step"] for p in progs) == 38 + 1
    tl = run(cyc, 3, 1)
    assert 38 / 3 <= tl.makespan < 38


def test_batched_calls_cost_one_each():
    # One rank, 16 intervals, cf 4: each F-sweep takes 3 batched calls (positions 1..3)
    # and one for the chain ends, instead of 12 + 4 single steps.
    cyc = Cycle(ntime=16, max_levels=2, cfactor=4, batched=True)
    progs = solve_program(cyc, 1, 1)
    counts = program_counts(progs[0])
    # relax 4 calls, restrict 4 + 1 (coarse tau), coarse solve 4 single, final 3.
    assert counts == {"allreduce": 3, "step_batch": 12, "step_batch_items": 16 + 16 + 4 + 12,
                      "step": 4}
    assert run(cyc, 1, 1).makespan == 16


def test_critical_path_parts_add_up():
    cyc = Cycle(ntime=16, max_levels=2, cfactor=4)
    progs = solve_program(cyc, 2, 2)
    tl = simulate(progs, lambda op: 2.0 if op.kind == "step" else 0.5,
                  lambda op: 0.25, lambda op, n: 1.0)
    assert sum(tl.path.values()) == pytest.approx(tl.makespan)
    assert tl.path["comm"] > 0


def test_a_deadlock_is_a_schedule_bug():
    progs = [[Op("recv", "x", peer=1)], [Op("recv", "x", peer=0)]]
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate(progs, unit, lambda op: 0.0, lambda op, n: 0.0)


def test_bad_cycle_names_the_option():
    with pytest.raises(ValueError, match="cfactor must be an int >= 2"):
        Cycle(ntime=8, cfactor=1)
    with pytest.raises(ValueError, match="ntime"):
        Cycle(ntime=0)


# ------------------------------------------- step calls of real solves
@pytest.mark.parametrize("name,fields,iterations", CASES, ids=[c[0] for c in CASES])
def test_counts_equal_a_real_solve(name, fields, iterations):
    real, _, calls = run_counts(fields, iterations)
    assert [real] == model_counts(fields, iterations, 1)
    # call by call, in order: what braidpy.perf.timeline pairs with a measured run
    assert [calls] == model_calls(fields, iterations, 1)


@pytest.mark.parametrize("name,fields,iterations", CASES, ids=[c[0] for c in CASES])
def test_counts_equal_a_real_trial_solve(name, fields, iterations):
    """A line-search trial's solve (Core.solve(final_sweep=False)): no final F-sweep
    where the last point is a C-point, the whole sweep where it is not."""
    real, _, calls = run_counts(fields, iterations, final_sweep=False)
    assert [real] == model_counts(fields, iterations, 1, final_sweep=False)
    assert [calls] == model_calls(fields, iterations, 1, final_sweep=False)
    whole, _, _ = run_counts(fields, iterations)
    levels = hierarchy(Cycle(**fields), 1)
    if len(levels) > 1 and fields["ntime"] % levels[0].cf == 0:
        assert sum(real.values()) < sum(whole.values()), name
    else:
        assert real == whole, name


@pytest.mark.parametrize("nranks", [2, 4])
def test_counts_equal_a_real_solve_per_rank_under_mpi(nranks, tmp_path):
    out = launch("mpi_perf_driver.py", nranks, tmp_path)
    for name, fields, iterations in CASES:
        for final_sweep in (True, False):
            key = name if final_sweep else name + ":trial"
            model = model_counts(fields, iterations, nranks, final_sweep)
            real = [row["counts"] for row in out[key]]
            assert real == model, key
            assert [row["calls"] for row in out[key]] == model_calls(
                fields, iterations, nranks, final_sweep), key
            ranges = [tuple(row["owned"]) for row in out[key]]
            assert ranges == block_ranges(fields["ntime"] + 1, nranks)
