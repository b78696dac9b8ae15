"""Training with image rows split over space ranks: grids 1x2x1,
1x2x2, 2x2x1 and 1x4x1 give the single-process gradient and training to rounding, the
same bits on every rank; a failure on one rank stops every rank; a checkpoint of a
split run resumes in one process; dense networks are refused. The driver is
tests/mpi_space_driver.py (one launch per rank count runs every grid and case)."""

import numpy as np
import pytest
from hybrid_cases import grids
from mpi_launch import launch
from space_cases import conv, gradient_case, resume_serially, training_case

from braidpy.parallel import ProcessGrid
from braidpy.train.spatial_training import check_space_grid, max_space

SHAPES = {2: ["1x2x1"], 4: ["1x2x2", "2x2x1", "1x4x1"]}


@pytest.fixture(scope="module")
def serial():
    grid = ProcessGrid(None)
    return {"gradient": gradient_case(grid), "train": training_case(grid),
            "train4": training_case(grid, iterations=4)}


@pytest.fixture(scope="module", params=[2, 4])
def run(request, tmp_path_factory):
    nranks = request.param
    folder = tmp_path_factory.mktemp(f"space{nranks}")
    return nranks, launch("mpi_space_driver.py", nranks, folder, folder / "saved-"), folder


def test_every_grid_ran_and_the_ranks_really_ran_together(run):
    nranks, res, _ = run
    assert res["world"] == [[nranks] * nranks, list(range(nranks))]
    assert sorted(n for n in res if "x" in n) == sorted(SHAPES[nranks])
    height = conv()[1].shape[2]
    for (data, space, layers), cases in grids(res):
        records = cases["gradient"]
        assert [tuple(r["coords"]) for r in records] == \
            [(d, s, l) for d in range(data) for s in range(space) for l in range(layers)]
        for d in range(data):
            for l in range(layers):  # the space ranks' bands tile the image's rows
                bands = [r["rows"] for r in records if r["coords"][0] == d
                         and r["coords"][2] == l]
                assert bands[0][0] == 0 and bands[-1][1] == height
                assert all(a[1] == b[0] for a, b in zip(bands, bands[1:])), bands
                assert len(bands) == space and all(hi > lo for lo, hi in bands)
        if layers > 1:  # and the layer ranks split the layers
            assert len({tuple(r["owned"]) for r in records}) == layers


@pytest.mark.parametrize("case", ["gradient", "after_errors"])
def test_the_gradient_is_the_single_process_gradient(run, serial, case):
    _, res, _ = run
    ref = serial["gradient"]
    grad0 = np.array(ref["grad"])
    for shape, cases in grids(res):
        records = cases[case]
        grad = np.array(records[0]["grad"])
        assert abs(records[0]["loss"] - ref["loss"]) <= 1e-12 * abs(ref["loss"]), shape
        assert np.linalg.norm(grad - grad0) <= 1e-12 * np.linalg.norm(grad0), shape
        assert len({r["digest"] for r in records}) == 1, f"ranks disagree on {shape}"
        assert {r["loss"] for r in records} == {records[0]["loss"]}


def test_mgrit_sees_the_norms_of_the_whole_image(run, serial):
    """Every rank of a space group makes MGRIT's decisions on the same residuals: those
    of the whole image (the last ones are rounding noise: compared loosely)."""
    _, res, _ = run
    for shape, cases in grids(res):
        records = cases["gradient"]
        for what in ("primal", "adjoint"):
            for d in range(shape[0]):  # the same residuals on the group's layer rank 0s
                assert len({tuple(r[what]) for r in records
                            if r["coords"][0] == d and r["coords"][2] == 0}) == 1
            if shape[0] > 1:  # data groups: the residuals of their shards
                continue
            ref = serial["gradient"][what]
            for r in records:
                assert len(r[what]) == len(ref), (shape, what)
                np.testing.assert_allclose(r[what][:2], ref[:2], rtol=1e-10, atol=0)


def test_training_is_the_single_process_training_on_every_rank(run, serial):
    _, res, _ = run
    ref = serial["train"]
    for shape, cases in grids(res):
        records = cases["train"]
        assert len({r["digest"] for r in records}) == 1, f"{shape} ranks differ"
        np.testing.assert_allclose(records[0]["params"], ref["params"], rtol=1e-9,
                                   atol=1e-12)
        hist, href = np.array(records[0]["history"]), np.array(ref["history"])
        np.testing.assert_allclose(hist[:, :2], href[:, :2], rtol=1e-10, atol=0)
        assert hist[:, 2].tolist() == href[:, 2].tolist()  # validation accuracy


def test_a_checkpoint_of_split_rows_resumes_in_one_process(run, serial):
    _, res, folder = run
    ref = serial["train4"]["history"]
    for shape, cases in grids(res):
        history = resume_serially(str(folder / f"saved-{'x'.join(map(str, shape))}.ckpt"), 4)
        assert len(history) == 4
        np.testing.assert_allclose(np.array(history)[:, :2], np.array(ref)[:, :2],
                                   rtol=1e-9, atol=0)


@pytest.mark.parametrize("where", ["forward", "gradient_batched"])
def test_a_failure_on_one_rank_stops_every_rank_in_the_same_step(run, where):
    nranks, res, _ = run
    victim = nranks - 1
    for shape, cases in grids(res):
        outcomes = cases[f"error/{where}"]
        assert len({o[2] for o in outcomes}) == 1, (shape, outcomes)
        for rank, (kind, message, _, seconds) in enumerate(outcomes):
            assert seconds < 30, (shape, outcomes)
            if rank == victim:
                assert (kind, message) == ("Boom", f"{where} failed"), (shape, outcomes)
            else:
                assert kind in ("BraidError", "SpaceFailure"), (shape, outcomes)
                assert "Boom" in message or "space rank failed" in message, message


def test_a_dense_network_is_refused_on_every_rank(run):
    nranks, res, _ = run
    assert res["dense_refused"] == [
        f"training on the grid data 1 x space {nranks} x layers 1 (rank {r} at d=0, "
        f"s={r}, l=0) splits image rows over {nranks} space ranks, but the network is "
        f"dense (input shape (2,)): it has no rows to split; use --grid D,1,L"
        for r in range(nranks)]


class _Grid:
    def __init__(self, space):
        self.space = space

    def describe(self):
        return f"data 1 x space {self.space} x layers 1"


def test_which_networks_and_modes_can_split_rows():
    net = conv()[0]  # 5 rows, kernel 3: radius 1
    assert max_space(net) == 5 and max_space(net, "serial") == 1
    check_space_grid(_Grid(5), net, "exact")
    with pytest.raises(ValueError, match="5 image rows over 6 space ranks give bands "
                       "thinner than the kernel radius 1; at most 5"):
        check_space_grid(_Grid(6), net)
    with pytest.raises(ValueError, match="mode 'serial' runs the whole network"):
        check_space_grid(_Grid(2), net, "serial")
