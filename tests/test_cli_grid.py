"""``braidpy train --grid D,S,L``: data x space x layers training from the
command line, and the errors for grids that cannot train."""

import json

import pytest
from test_cli import TINY, cli, ok, read_log

from braidpy.cli import build_parser


@pytest.mark.parametrize("value", ["2,1", "Auto", "0,1,1", "1,1,x", "2,1,1,1"])
def test_a_malformed_grid_is_a_usage_error_naming_the_value(value, capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["train", "peaks", "--grid", value])
    assert info.value.code == 2
    assert (f"--grid: expected D,S,L (data, space, layer ranks: three integers >= 1) or "
            f"auto, got {value!r}") in capsys.readouterr().err


def test_a_grid_that_does_not_fit_the_ranks_is_a_usage_error():
    proc = cli("train", "peaks", *TINY, "--grid", "2,1,1")
    assert proc.returncode == 2, proc.stderr
    assert ("--grid 2,1,1: a grid of data=2 x space=1 x layers=1 = 2 ranks does not fit a "
            "communicator of 1 rank") in proc.stderr


def test_a_grid_with_space_is_refused_for_a_dense_network_under_mpi():
    proc = cli("train", "peaks", *TINY, "--grid", "1,2,1", nranks=2)
    assert proc.returncode == 2, proc.stderr
    assert "--grid 1,2,1: training on the grid data 1 x space 2 x layers 1" in proc.stderr
    assert "the network is dense (input shape (2,)): it has no rows to split" in proc.stderr


def test_digits_trains_on_two_space_ranks_as_on_one_process(tmp_path):
    short = ["--iterations", "2", "--validate-every", "1", "--quiet"]
    split, one = tmp_path / "split.jsonl", tmp_path / "one.jsonl"
    ok("train", "digits", *short, "--grid", "1,2,1", "--log", split, nranks=2)
    ok("train", "digits", *short, "--log", one)
    (h2, steps2, _), (_, steps1, _) = read_log(split), read_log(one)
    assert (h2["grid"], h2["ranks"]) == ([1, 2, 1], 2)
    assert len(steps2) == len(steps1) == 2
    for a, b in zip(steps2, steps1):  # the same training to rounding
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-10, abs=0)
        assert a["val_accuracy"] == b["val_accuracy"]


def test_data_groups_train_as_the_layer_ranks_do_and_the_checkpoint_resumes_serially(
        tmp_path):
    exact = ["--mode", "exact", "--abs-tol", "1e-13", "--quiet"]
    logs = {}
    for grid in ("2,1,1", "1,1,2"):
        log = tmp_path / f"{grid}.jsonl"
        ok("train", "peaks", *TINY, *exact, "--grid", grid, "--log", log,
           "--checkpoint", tmp_path / f"{grid}.ckpt", nranks=2)
        logs[grid] = read_log(log)
    (h2, steps2, end2), (h1, steps1, _) = logs["2,1,1"], logs["1,1,2"]
    assert (h2["grid"], h1["grid"], h2["ranks"]) == ([2, 1, 1], [1, 1, 2], 2)
    for a, b in zip(steps2, steps1):  # exact gradients: the same training to rounding
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-10, abs=0)
        assert a["val_accuracy"] == b["val_accuracy"]
    # One process continues the two data groups' checkpoint.
    log = tmp_path / "resumed.jsonl"
    ok("train", "peaks", *TINY, *exact, "--iterations", "4", "--checkpoint",
       tmp_path / "2,1,1.ckpt", "--resume", "--log", log)
    _, resumed, _ = read_log(log)
    assert [r["iteration"] for r in resumed] == [1, 2, 3, 4]
    assert [r["loss"] for r in resumed[:3]] == [r["loss"] for r in steps2]
    assert json.dumps(end2)  # the end record is plain JSON
