"""ProcessGrid: data x space x layers sub-communicators at 1, 2 and 4
ranks."""


import numpy as np
import pytest
from apps import Decay
from mpi_launch import launch

import braidpy
from braidpy.parallel import ProcessGrid


def test_serial_grid_is_one_rank_without_communicators():
    grid = ProcessGrid(None)
    assert grid.shape == (1, 1, 1) and grid.coords == (0, 0, 0)
    assert (grid.layers_comm, grid.space_comm, grid.data_comm) == (None, None, None)
    assert grid.world_rank(0, 0, 0) == 0
    with pytest.raises(ValueError, match="s=1 is outside 0..0"):
        grid.world_rank(0, 1, 0)


@pytest.mark.parametrize("kw, words", [
    (dict(data=2), "data=2 x space=1 x layers=1 = 2 ranks does not fit a communicator of 1"),
    (dict(space=0), "space must be an int >= 1, got 0"),
    (dict(layers=1.0), "layers must be an int >= 1, got 1.0"),
    (dict(data=True), "data must be an int >= 1, got True"),
])
def test_bad_grids_are_refused_naming_the_sizes(kw, words):
    with pytest.raises(ValueError) as info:
        ProcessGrid(None, **kw)
    assert words in str(info.value)


@pytest.fixture(scope="module", params=[1, 2, 4])
def run(request, tmp_path_factory):
    nranks = request.param
    return nranks, launch("mpi_grid_driver.py", nranks, tmp_path_factory.mktemp("grid"))


def test_every_shape_of_the_rank_count_is_built(run):
    nranks, res = run
    expected = {1: {"1x1x1"}, 2: {"1x1x2", "1x2x1", "2x1x1"},
                4: {"1x1x4", "1x2x2", "1x4x1", "2x1x2", "2x2x1", "4x1x1"}}[nranks]
    assert set(res["shapes"]) == expected


def test_coordinates_and_sub_communicators(run):
    nranks, res = run
    for name, records in res["shapes"].items():
        data, space, layers = map(int, name.split("x"))
        assert [r["rank"] for r in records] == list(range(nranks))
        coords = {tuple(r["coords"]): r["rank"] for r in records}
        assert len(coords) == nranks  # one rank per grid point
        for r in records:
            d, s, l = r["coords"]
            assert r["rank"] == r["world_rank"] == (d * space + s) * layers + l
            # Each group holds exactly the ranks sharing the other two coordinates,
            # in the order of its own coordinate.
            assert r["members"]["layers"] == [coords[(d, s, k)] for k in range(layers)]
            assert r["members"]["space"] == [coords[(d, k, l)] for k in range(space)]
            assert r["members"]["data"] == [coords[(k, s, l)] for k in range(data)]


def test_space_fastest_is_xbraids_split_commworld(run):
    nranks, res = run
    for name, records in res["space_fastest"].items():
        data, space, layers = map(int, name.split("x"))
        coords = {tuple(r["coords"]): r["rank"] for r in records}
        assert len(coords) == nranks
        for r in records:
            d, s, l = r["coords"]
            assert r["rank"] == r["world_rank"] == (d * layers + l) * space + s
            assert r["members"]["layers"] == [coords[(d, s, k)] for k in range(layers)]
            assert r["members"]["space"] == [coords[(d, k, l)] for k in range(space)]
            assert r["members"]["data"] == [coords[(k, s, l)] for k in range(data)]
            assert r["final"] == records[0]["final"]
        if data == 1:
            # px = space: XBraid's comm_x / comm_t, computed by its formula on the same
            # ranks, hold the same ranks in the same order as space / layers.
            xb = res["xbraid_split"][str(space)]
            for r, x in zip(records, xb):
                assert r["members"]["space"] == x["x"]
                assert r["members"]["layers"] == x["t"]
    if nranks == 4:  # 2x2: space pairs (0,1), (2,3); time pairs (0,2), (1,3)
        recs = res["space_fastest"]["1x2x2"]
        assert [r["members"]["space"] for r in recs] == [[0, 1], [0, 1], [2, 3], [2, 3]]
        assert [r["members"]["layers"] for r in recs] == [[0, 2], [1, 3], [0, 2], [1, 3]]


def test_a_solve_over_each_layer_group_splits_the_layers_and_matches_serial(run):
    nranks, res = run
    serial = braidpy.solve(Decay(), 0.0, 4.0, 64, cfactor=2, abs_tol=1e-13).final
    for name, records in res["shapes"].items():
        layers = int(name.split("x")[2])
        for r in records:
            np.testing.assert_array_equal(np.array(r["final"]), serial)
        groups = {}
        for r in records:
            groups.setdefault(tuple(r["coords"][:2]), []).append(r["owned"])
        for owned in groups.values():
            points = sorted(i for lo, hi in owned for i in range(lo, hi))
            assert points == list(range(65)), (name, owned)
            assert layers == 1 or max(hi - lo for lo, hi in owned) < 65, (name, owned)


def test_shapes_that_do_not_fit_are_refused_under_mpi(run):
    nranks, res = run
    assert res["errors"][0] == (f"a grid of data={nranks + 1} x space=1 x layers=1 = "
                                f"{nranks + 1} ranks does not fit a communicator of "
                                f"{nranks} rank{'' if nranks == 1 else 's'}")
    assert "layers=" in res["errors"][1] and "does not fit" in res["errors"][1]
    assert res["errors"][2] == "data must be an int >= 1, got 0"
    assert res["errors"][3] == "data must be an int >= 1, got True"


def test_gradients_are_averaged_over_each_data_group(run):
    nranks, res = run
    for name, records in res["shapes"].items():
        data = int(name.split("x")[0])
        for r in records:
            members = r["members"]["data"]
            pattern = np.array(r["pattern"])
            expected = np.mean([(m + 1) * pattern for m in members], axis=0)
            np.testing.assert_allclose(r["average"], expected, rtol=1e-15, atol=0)
        # The data groups' shards of a batch of 10 tile it, in group order.
        shards = {r["coords"][0]: r["shard"] for r in records}
        assert [i for d in range(data) for i in shards[d]] == list(range(10))


def test_the_averager_refuses_bad_pieces():
    from braidpy.parallel.data import GradientAverager, shard_of

    avg = GradientAverager(None, 10, bucket=4)
    avg.add(0, np.ones(4))
    with pytest.raises(ValueError, match="overlaps one added before"):
        avg.add(2, np.ones(3))
    with pytest.raises(ValueError, match=r"piece \[8, 12\) is outside the gradient of 10"):
        avg.add(8, np.ones(4))
    with pytest.raises(ValueError, match="gradient entries were never added"):
        GradientAverager(None, 10).finish()
    with pytest.raises(ValueError, match="a batch of 2 samples cannot feed 3 data groups"):
        shard_of(2, 3, 0)
    assert [len(shard_of(10, 4, g)) for g in range(4)] == [3, 3, 2, 2]


def test_arguments_that_differ_on_one_rank_raise_on_every_rank(run):
    """Checked across ranks before the collective Splits: a bad argument on one rank, or
    a different shape or rank order, is an error on every rank (was a hang in Split)."""
    nranks, res = run
    if nranks == 1:
        return
    bad = res["divergent"]["bad on the last rank"]
    assert bad[-1] == ["ValueError", "data must be an int >= 1, got 0"]
    for kind, text in bad[:-1]:
        assert kind == "BraidError" and f"rank {nranks - 1}" in text, text
        assert "data must be an int >= 1, got 0" in text, text
    for case, field in (("shape differs on rank 0", "data"),
                        ("order differs on rank 0", "space_fastest")):
        for kind, text in res["divergent"][case]:
            assert kind == "RankMismatchError", (case, kind, text)
            assert f"{field} is" in text and "same ProcessGrid arguments" in text, text
