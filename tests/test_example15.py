"""examples/ex15_adaptive_refinement.py serially and on 2 MPI ranks: the error estimates
refine the grid (into the boundary layer), the adaptive error beats the uniform coarse
grid's and the uniform grid of the same size, and 1 and 2 ranks print the same."""

import math
import re

from test_examples import NUM, number, run

SCRIPT = "ex15_adaptive_refinement.py"
ARGS = []


def facts(out):
    """Per run: (intervals, iterations, max error, error at T); the refined grid sizes."""
    found = {}
    for name in ("uniform coarse", "adaptive", "uniform, same size"):
        m = re.search(rf"  {re.escape(name)}: (\d+) intervals, (\d+) iterations, "
                      rf"max error {NUM}, error at T {NUM}\n", out)
        assert m, f"{name!r} not in:\n{out}"
        found[name] = (int(m.group(1)), int(m.group(2)), float(m.group(3)), float(m.group(4)))
    found["sizes"] = [int(n) for n in re.findall(r"refinement \d+: (\d+) intervals", out)]
    return found


def test_example_serial_and_two_ranks():
    serial = run(1, SCRIPT, ARGS)
    parallel = run(2, SCRIPT, ARGS)
    assert "1 MPI rank(s)" in serial and "2 MPI rank(s)" in parallel
    one, two = facts(serial), facts(parallel)
    # The same grids, iterations and errors (to the printed digits) at 1 and 2 ranks.
    assert one == two
    assert serial.split("\n", 1)[1] == parallel.split("\n", 1)[1]
    n0, _, coarse_err, _ = one["uniform coarse"]
    n, iters, adaptive_err, adaptive_at_t = one["adaptive"]
    same_n, _, same_err, _ = one["uniform, same size"]
    # Refinements happened, each growing the grid, and the adaptive run ends on the last.
    sizes = one["sizes"]
    assert n0 == 64 and len(sizes) >= 3 and sizes[0] > n0
    assert all(a < b for a, b in zip(sizes, sizes[1:])) and sizes[-1] == n == same_n
    [refinements] = number(r"refinements: (\d+);", serial)
    assert refinements == len(sizes)
    assert iters > 1
    # The points went into the layer at t = 0: most intervals there, dt down by > 2^8.
    small, large = number(rf"smallest dt {NUM}, largest dt {NUM}", serial)
    assert large == 2.0 / 64 and small < large / 256
    [in_layer] = number(r"(\d+) intervals in the layer", serial)
    assert in_layer > n / 2
    # The adaptive grid's largest error: 10x below the coarse grid's and the same-size
    # uniform grid's; away from the layer it keeps the coarse grid's accuracy.
    assert adaptive_err < coarse_err / 10 and adaptive_err < same_err / 10
    assert math.isclose(adaptive_at_t, one["uniform coarse"][3], rel_tol=1e-2)
