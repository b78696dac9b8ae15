"""Spatially parallel convolutions under mpiexec (see test_spatial.py).

    mpiexec -n P python tests/mpi_spatial_driver.py P OUT.json

All P ranks form the space communicator. For several image heights and kernel sizes,
every rank computes its band of the forward convolution, the input VJP and the weight
VJP; rank 0 writes the gathered images and their differences from the single-process
results.
"""

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402
from mpi_world import assert_split, expect_world  # noqa: E402

from braidpy.nn.conv import conv2d, conv2d_input_vjp, conv2d_weight_vjp  # noqa: E402
from braidpy.parallel.spatial import (RowSplit, conv2d_input_vjp_rows,  # noqa: E402
                                      conv2d_rows, conv2d_weight_vjp_rows)

COMM = MPI.COMM_WORLD


def relative(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def case(height, k, width=6, batch=2, cin=3, cout=2):
    rng = np.random.default_rng(height * 10 + k)  # the same data on every rank
    x = rng.standard_normal((batch, cin, height, width))
    K = rng.standard_normal((cout, cin, k, k))
    g = rng.standard_normal((batch, cout, height, width))
    try:
        split = RowSplit(COMM, height)
        assert_split(COMM, split.mine, height, "image rows")
        y = split.gather(conv2d_rows(split.band(x), K, split))
        dx = split.gather(conv2d_input_vjp_rows(split.band(g), K, split))
        dK = conv2d_weight_vjp_rows(split.band(g), split.band(x), k, split)
    except ValueError as exc:
        return {"error": str(exc)}
    return {"forward": relative(y, conv2d(x, K)),
            "input_vjp": relative(dx, conv2d_input_vjp(g, K)),
            "weight_vjp": relative(dK, conv2d_weight_vjp(g, x, k)),
            "rows": [split.mine.start, split.mine.stop]}


def main():
    expect_world(COMM, sys.argv[1])
    path = sys.argv[2]
    out = {}
    for height, k in [(12, 1), (12, 3), (12, 5), (13, 3), (9, 3), (7, 5), (2, 3)]:
        out[f"{height}-{k}"] = COMM.gather(case(height, k))
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
