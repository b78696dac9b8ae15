"""Data x layers training on a ProcessGrid at 1, 2 and 4 ranks: every grid
D x 1 x L gives the single-process gradient of the concatenated batch, trains the same
on every rank and run to run, resumes checkpoints of any grid, and stops every rank
together when one fails. The driver is tests/mpi_hybrid_driver.py (one launch per rank
count runs every grid and case)."""

import numpy as np
import pytest
from hybrid_cases import PROBLEMS, TRAININGS, dense, grids, training_case
from mpi_launch import launch

from braidpy.parallel import ProcessGrid
from braidpy.train import TrainConfig, Trainer
from braidpy.train.checkpoint import read_header
from braidpy.train.sharded import check_training_grid

SHAPES = {1: ["1x1x1"], 2: ["1x1x2", "2x1x1"], 4: ["1x1x4", "2x1x2", "4x1x1"]}


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The single-process references, and a checkpoint every grid resumes."""
    path = tmp_path_factory.mktemp("hybrid-serial") / "serial.ckpt"
    grid = ProcessGrid(None)
    out = {"checkpoint": str(path),
           "saved": training_case(grid, "oneshot_adam", iterations=3, checkpoint=str(path))}
    for name, problem in PROBLEMS.items():
        net, X, C = problem()
        p = net.init_params(seed=5, scale=1.0)
        out[name] = net.loss_and_gradient(p, X, C)
    for name in TRAININGS:
        out[f"train/{name}"] = training_case(grid, name)
    out["resume"] = training_case(grid, "oneshot_adam", resume=str(path))
    return out


@pytest.fixture(scope="module", params=[1, 2, 4])
def run(request, serial, tmp_path_factory):
    nranks = request.param
    folder = tmp_path_factory.mktemp(f"hybrid{nranks}")
    res = launch("mpi_hybrid_driver.py", nranks, folder, serial["checkpoint"],
                 folder / "saved-")
    return nranks, res, folder


def test_every_grid_ran_and_the_ranks_really_ran_together(run):
    nranks, res, _ = run
    assert sorted(n for n in res if "x" in n) == sorted(SHAPES[nranks])
    for (data, _, layers), cases in grids(res):
        for case in ("gradient/dense_uneven", "gradient/conv_uneven"):
            records = cases[case]
            assert [tuple(r["coords"]) for r in records] == \
                [(d, 0, l) for d in range(data) for l in range(layers)]
            npoints = max(r["owned"][1] for r in records)
            for d in range(data):  # each data group's layer ranks split the layers
                owned = [r["owned"] for r in records if r["coords"][0] == d]
                points = sorted(i for lo, hi in owned for i in range(lo, hi))
                assert points == list(range(npoints)), (case, owned)
                assert layers == 1 or max(hi - lo for lo, hi in owned) < npoints
            # The groups' shards tile the batch in group order, sizes within one.
            shards = [records[d * layers]["shard"] for d in range(data)]
            assert shards[0][0] == 0 and all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
            sizes = [hi - lo for lo, hi in shards]
            assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("case", ["dense_even", "dense_uneven", "conv_uneven",
                                  "dense_uneven/no_overlap"])
def test_the_gradient_is_the_single_process_gradient_of_the_whole_batch(run, serial, case):
    nranks, res, _ = run
    loss0, grad0 = serial[case.split("/")[0]]
    for shape, cases in grids(res):
        records = cases[f"gradient/{case}"]
        grad = np.array(records[0]["grad"])
        assert abs(records[0]["loss"] - loss0) <= 1e-12 * abs(loss0), shape
        assert np.linalg.norm(grad - grad0) <= 1e-12 * np.linalg.norm(grad0), shape
        assert len({r["digest"] for r in records}) == 1, f"ranks disagree on {shape}"
        assert {r["loss"] for r in records} == {records[0]["loss"]}


def test_a_gradient_after_the_failures_is_still_right(run, serial):
    nranks, res, _ = run
    loss0, grad0 = serial["dense_even"]
    for shape, cases in grids(res):
        grad = np.array(cases["after_errors"][0]["grad"])
        assert np.linalg.norm(grad - grad0) <= 1e-12 * np.linalg.norm(grad0), shape


@pytest.mark.parametrize("name", sorted(TRAININGS))
def test_training_is_the_same_on_every_rank_and_run_to_run(run, serial, name):
    nranks, res, _ = run
    for shape, cases in grids(res):
        first, again = cases[f"train/{name}"], cases[f"train/{name}/again"]
        assert len({r["digest"] for r in first + again}) == 1, f"{shape} differs"
        assert first[0]["history"] == again[0]["history"]
        losses = [h[0] for h in first[0]["history"]]
        assert losses[-1] < losses[0], (shape, losses)
        if name == "serial_sgd":  # layer steps count every data group's: 2N each
            assert first[0]["steps"] == [shape[0] * 2 * 16] * len(losses)
        if name != "oneshot_adam":  # exact gradients: the single-process training
            # (checked one-shot steps take the exact gradient: serial backprop's SGD)
            ref = serial["train/serial_sgd" if name == "oneshot_sgd_checked" else
                         f"train/{name}"]
            np.testing.assert_allclose(first[0]["params"], ref["params"], rtol=1e-9,
                                       atol=1e-12)
            # Validation counts every group's share: the same accuracy.
            assert [h[2] for h in first[0]["history"]] == [h[2] for h in ref["history"]]


def test_any_grid_resumes_a_checkpoint_and_saves_one(run, serial):
    nranks, res, folder = run
    saved = serial["saved"]["history"]
    for shape, cases in grids(res):
        records = cases["resume"]
        assert len({r["digest"] for r in records}) == 1, shape
        assert records[0]["history"][:3] == saved
        if shape[0] == 1:  # one data group: its warm states carry over exactly
            assert records[0]["history"] == serial["resume"]["history"]
        # More groups: the serial run's MGRIT states split into shards (adjoints
        # rescaled), so one-shot training goes on as the serial run does, to rounding.
        np.testing.assert_allclose([h[:2] for h in records[0]["history"]],
                                   [h[:2] for h in serial["resume"]["history"]],
                                   rtol=1e-9, atol=0)
        # Its own checkpoint: each data group takes back its MGRIT states, and the run
        # continues as if never stopped.
        own, whole = cases["resume_own"], cases["train/oneshot_adam"]
        assert own[0]["history"] == whole[0]["history"], shape
        assert {r["digest"] for r in own} == {whole[0]["digest"]}, shape
        path = folder / f"saved-{'x'.join(map(str, shape))}.ckpt"
        warm = read_header(path)["warm"]
        if shape[0] > 1:
            assert len(warm["data_groups"]) == shape[0]
        # A single process continues the grid's checkpoint as the grid does (its
        # groups' MGRIT states joined into the whole batch's).
        net, X, C = dense(30)
        cfg = TrainConfig(seed=2, tikhonov=1e-3, ddt=1e-2, classifier_reg=1e-3,
                          **TRAININGS["oneshot_adam"])
        trainer = Trainer(net, (X, C), (X[:11], C[:11]), cfg)
        trainer.resume(str(path))
        trainer.run()
        np.testing.assert_allclose([[r["loss"], r["objective"]] for r in trainer.history],
                                   [h[:2] for h in own[0]["history"]], rtol=1e-9, atol=0)


@pytest.mark.parametrize("where, what", [("on_step", "reporting the training step"),
                                         ("adjoint", None), ("validation", "validation")])
def test_a_failure_on_one_rank_stops_every_rank_in_the_same_step(run, where, what):
    nranks, res, _ = run
    for shape, cases in grids(res):
        outcomes = cases[f"error/{where}"]
        victim = nranks - 1
        steps = {o[2] for o in outcomes}
        assert len(steps) == 1, (shape, outcomes)  # nobody took another step
        for rank, (kind, message, _, seconds) in enumerate(outcomes):
            assert seconds < 30, (shape, outcomes)
            if rank == victim:
                assert kind == "Boom", (shape, outcomes)
            else:
                assert kind == "BraidError", (shape, outcomes)
                assert f"rank {victim}: Boom" in message or "Boom" in message, message
                if what is not None:
                    assert message.startswith(what), message


def test_training_refuses_a_grid_with_space_for_a_dense_network(run):
    nranks, res, _ = run
    if nranks > 1:  # conv networks split rows: test_space_training.py
        assert res["space_refused"].startswith(
            f"training on the grid data 1 x space {nranks} x layers 1")
        assert "the network is dense" in res["space_refused"]


def test_grid_and_comm_are_not_both_given():
    net, X, C = dense(8)
    with pytest.raises(ValueError, match="either comm .* or grid, not both"):
        Trainer(net, (X, C), grid=ProcessGrid(None), comm=object())
    with pytest.raises(TypeError, match="grid must be a braidpy.parallel.ProcessGrid, got str"):
        check_training_grid("2,1,2")



def test_a_round_weights_its_pieces_and_names_a_piece_of_the_wrong_size():
    from braidpy.train.sharded import AveragingRound

    rnd = AveragingRound(None, None, 0.5, bucket=2)
    rnd.begin([("loss", 1), (("K", 3), 2)])
    rnd.add(("K", 3), np.array([2.0, 4.0]))
    with pytest.raises(ValueError, match=r"gradient piece 'loss' has 2 entries, not 1"):
        rnd.add("loss", [1.0, 2.0])
    rnd.add("loss", [3.0])
    out = rnd.finish()
    np.testing.assert_array_equal(out["loss"], [1.5])
    np.testing.assert_array_equal(out[("K", 3)], [1.0, 2.0])
    # Overlap off: the same numbers, reduced only in finish.
    off = AveragingRound(None, None, 2.0, overlap=False)
    off.begin([("g", 3)])
    off.add("g", np.arange(3.0))
    np.testing.assert_array_equal(off.finish()["g"], [0.0, 2.0, 4.0])


def test_the_gradient_solver_reports_the_objective_before_the_adjoint():
    from apps import DecayRate

    from braidpy.adjoint import GradientSolver

    class Recorded(DecayRate):
        def step_gradient(self, w, u, t0, t1, status):
            seen.append("gradient")
            return super().step_gradient(w, u, t0, t1, status)

    seen = []
    solver = GradientSolver(Recorded(), 0.0, 1.0, 8, primal=dict(cfactor=2, abs_tol=1e-12))
    result = solver.evaluate(after_objective=lambda J: seen.append(("objective", J)))
    assert seen[0] == ("objective", result.objective)
    assert seen.count("gradient") == 8 and len(seen) == 9
