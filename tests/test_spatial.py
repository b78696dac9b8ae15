"""Spatially parallel convolutions (issue 16, item 4): image rows split over 1, 2 and 4
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


def test_splits_the_halo_cannot_serve_are_refused(run):
    nranks, res = run
    if nranks == 1:
        assert all("error" not in r for rs in res.values() for r in rs)
        return
    assert res["2-3"][0]["error"] == f"height must be an int >= the {nranks} space ranks, got 2" \
        if nranks > 2 else "error" not in res["2-3"][0]
    if nranks == 4:  # 7 rows: bands 2, 2, 2, 1 and a 5x5 kernel needs 2 rows of halo
        assert "bands of 1 rows are thinner than the kernel radius 2" in \
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
