"""Spatially parallel convolutions: image rows split over 1, 2 and 4
ranks with a halo of the kernel radius; forward, backward data and backward filter equal
the single-process convolution to 1e-12."""


import numpy as np
import pytest
from mpi_launch import launch

from braidpy.nn.conv import conv2d
from braidpy.parallel.spatial import RowSplit, conv2d_rows


@pytest.fixture(scope="module", params=[1, 2, 4])
def run(request, tmp_path_factory):
    nranks = request.param
    return nranks, launch("mpi_spatial_driver.py", nranks, tmp_path_factory.mktemp("spatial"))


def test_bands_match_the_single_process_convolution(run):
    nranks, res = run
    checked = 0
    for name, per_rank in res.items():
        if name.startswith("layer-"):
            continue  # the next test
        height, k = map(int, name.split("-"))
        bands = [int(np.ceil(height / nranks)), height // nranks]
        if height < nranks or min(bands) < (k - 1) // 2 and nranks > 1:
            continue  # refused: see the next test
        for r in per_rank:
            assert "error" not in r, (name, r)
            for what in ("forward", "input_vjp", "weight_vjp"):
                assert r[what] <= 1e-12, (name, what, r)
        checked += 1
    assert checked >= 5


def test_batched_band_calls_match_the_whole_image_layer(run):
    """The space-split layer's batched step, adjoint and parameter gradient (one halo for
    all intervals, the whole layer's batched kernel on the extended band; per interval
    where a band is thinner than 2 kernel radii) equal ConvLayer's on whole images."""
    nranks, res = run
    ways = set()
    for name in ("layer-12-3", "layer-12-5", "layer-9-3", "layer-8-1"):
        for r in res[name]:
            assert "error" not in r, (name, r)
            for what in ("forward", "input_vjp", "weight_vjp"):
                assert r[what] <= 1e-12, (name, what, r)
            ways.add(r["batched_adjoint"])
    # 12 rows over 4 ranks with a 5x5 kernel: bands of 3 < 4, the per-interval adjoint
    assert ways == ({True, False} if nranks == 4 else {True})


def test_splits_the_halo_cannot_serve_are_refused(run):
    nranks, res = run
    if nranks == 1:
        assert all("error" not in r for rs in res.values() for r in rs)
        return
    assert res["2-3"][0]["error"] == f"height must be an int >= the {nranks} space ranks, got 2" \
        if nranks > 2 else "error" not in res["2-3"][0]
    if nranks == 4:  # 7 rows: bands 2, 2, 2, 1 and a 5x5 kernel needs 2 rows of halo
        assert "bands of 1 rows are thinner than the halo of 2 rows" in \
            res["7-5"][0]["error"]
        assert all(r["error"] == res["7-5"][0]["error"] for r in res["7-5"])


def test_the_rows_are_split_in_contiguous_bands():
    assert RowSplit(None, 7).rows == [range(0, 7)]
    with pytest.raises(ValueError, match="height must be an int >= the 1 space ranks, got 0"):
        RowSplit(None, 0)
    x = np.ones((1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"must be \(batch, C, 5, W\)"):
        conv2d_rows(x, np.ones((1, 1, 3, 3)), RowSplit(None, 5))
    np.testing.assert_array_equal(conv2d_rows(x, np.ones((1, 1, 3, 3)), RowSplit(None, 4)),
                                  conv2d(x, np.ones((1, 1, 3, 3))))


def test_a_space_channel_takes_no_message_of_a_failed_evaluation(tmp_path):
    """A SpaceChannel at 2 ranks (tests/space_cases.py, channel_case): an evaluation
    fails on rank 0 while rank 1 waits in a halo exchange (later: in a sum), leaving
    rank 1's messages unreceived, its receives pending and both ranks' failure notes in
    flight; the evaluations after it on the same channel must ignore all of that (new
    tags and an epoch per evaluation) and give the whole image's convolution and the
    right sums on both ranks. A message taken from the wrong evaluation shows as a wrong
    number, a spurious failure or a hang (the launch's timeout)."""
    res = launch("mpi_space_driver.py", 2, tmp_path, "--channel", timeout=120)
    assert res["world"] == [[2, 2], [0, 1]]
    records = res["channel"]
    assert [r["rows"] for r in records] == [[0, 3], [3, 6]]
    for key, scale in (("failed in a halo", 1.0), ("failed in a sum", 3.0)):
        failed = [r[key] for r in records]
        assert failed[0]["outcome"] == ["Boom", "rank 0 failed mid-way"], (key, failed)
        assert failed[1]["outcome"][0] == "SpaceFailure", (key, failed)
        assert "space rank failed in evaluation" in failed[1]["outcome"][1]
        assert [f["sum"] for f in failed] == [[3.0 * scale]] * 2  # before the failure
    for key, scale in (("next", 2.0), ("after", 4.0), ("last", 5.0)):
        for rank, r in enumerate(records):
            out = r[key]
            assert out["outcome"] == ["none", ""], (key, rank, out)
            assert out["sum"] == [3.0 * scale] and out["sum_after"] == [30.0 * scale]
            assert out["conv_error"] <= 1e-12, (key, rank, out)
