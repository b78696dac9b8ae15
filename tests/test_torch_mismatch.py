"""braidpy.torch.LayerParallel given different set-ups on one rank, at 2 and 4 ranks:
one clear error on every rank, in LayerParallel's own terms."""

import pytest
from test_reliability_mpi import launch

pytest.importorskip("torch")


@pytest.fixture(scope="module", params=[2, 4])
def mismatch(request, tmp_path_factory):
    nranks = request.param
    return nranks, launch("mpi_torch_mismatch_driver.py", nranks,
                          tmp_path_factory.mktemp("torch_mismatch"), timeout=180)


def test_the_ranks_really_ran_together(mismatch):
    nranks, res = mismatch
    assert res["size"] == nranks
    assert all(len(res[case]) == nranks for case in ("tstop", "oneshot", "depth", "option",
                                                    "invalid tstop"))


@pytest.mark.parametrize("case, field", [("tstop", "tstop is 1.0 on rank"),
                                         ("oneshot", "oneshot is None on rank"),
                                         ("depth", "depth is 8 on rank"),
                                         ("option", "options")])
def test_a_different_set_up_on_one_rank_is_one_error_everywhere(mismatch, case, field):
    nranks, res = mismatch
    outcomes = res[case]
    assert {o[0] for o in outcomes} == {"RankMismatchError"}, outcomes
    assert len({o[1] for o in outcomes}) == 1, outcomes
    assert outcomes[0][1].startswith("the ranks disagree on the LayerParallel set-up: ")
    assert field in outcomes[0][1], outcomes


def test_an_invalid_argument_on_one_rank_stops_every_rank(mismatch):
    nranks, res = mismatch
    outcomes, last = res["invalid tstop"], nranks - 1
    assert outcomes[last] == ["ValueError", "tstop must be a positive number, got -1.0"]
    for o in outcomes[:last]:
        assert o[0] == "BraidError" and f"rank {last}: ValueError: tstop" in o[1], outcomes
