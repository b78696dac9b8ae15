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


def layer_case(height, k, m=3, width=5, batch=2, channels=3):
    """The space-split conv layer's batched calls (one halo for m intervals, or per
    interval where bands are thinner than 2 radii) and plain calls against ConvLayer's
    on whole images."""
    from braidpy.nn import ConvLayer
    from braidpy.train.spatial_training import SpaceChannel, SpaceSplitConvLayer

    rng = np.random.default_rng(height * 100 + k)
    U = rng.standard_normal((m, batch, channels, height, width))
    W = rng.standard_normal(U.shape)
    Ks = 0.5 * rng.standard_normal((m, channels, channels, k, k))
    bs = rng.standard_normal((m, channels))
    hs = np.array([0.3, 0.2, 0.1][:m])
    whole = ConvLayer(channels, k, "tanh")
    try:
        channel = SpaceChannel(COMM, height)
        channel.begin()
        split = SpaceSplitConvLayer(whole, channel)
        rows = slice(channel.mine.start, channel.mine.stop)

        def joined(bands):
            return np.stack([channel.join_bands(b) for b in bands])

        y = joined(split.forward_batched(U[..., rows, :], Ks, bs, hs))
        dx = joined(split.adjoint_batched(W[..., rows, :], U[..., rows, :], Ks, bs, hs))
        dK, db = split.gradient_batched(W[..., rows, :], U[..., rows, :], Ks, bs, hs)
        dK, db = channel.sum(dK), channel.sum(db)
        # and one interval's plain calls (the coarse level's steps)
        args = (Ks[1], bs[1], hs[1])
        y1 = channel.join_bands(split.forward(U[1][..., rows, :], *args))
        dx1 = channel.join_bands(split.adjoint(W[1][..., rows, :], U[1][..., rows, :], *args))
        dK1, db1 = (channel.sum(d) for d in split.gradient(W[1][..., rows, :],
                                                            U[1][..., rows, :], *args))
        channel.free()
    except ValueError as exc:
        return {"error": str(exc)}
    dK_ref, db_ref = whole.gradient_batched(W, U, Ks, bs, hs)
    dK1_ref, db1_ref = whole.gradient(W[1], U[1], *args)
    return {"forward": max(relative(y, whole.forward_batched(U, Ks, bs, hs)),
                           relative(y1, whole.forward(U[1], *args))),
            "input_vjp": max(relative(dx, whole.adjoint_batched(W, U, Ks, bs, hs)),
                             relative(dx1, whole.adjoint(W[1], U[1], *args))),
            "weight_vjp": max(relative(dK, dK_ref), relative(db, db_ref),
                              relative(dK1, dK1_ref), relative(db1, db1_ref)),
            "batched_adjoint": len(channel.mine) >= k - 1}


def main():
    expect_world(COMM, sys.argv[1])
    path = sys.argv[2]
    out = {}
    for height, k in [(12, 1), (12, 3), (12, 5), (13, 3), (9, 3), (7, 5), (2, 3)]:
        out[f"{height}-{k}"] = COMM.gather(case(height, k))
    for height, k in [(12, 3), (12, 5), (9, 3), (8, 1)]:
        out[f"layer-{height}-{k}"] = COMM.gather(layer_case(height, k))
    if COMM.rank == 0:
        Path(path).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
