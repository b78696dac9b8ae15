"""Faults in training steps outside the solves, at 2 and 4 ranks,
and ranks given different training set-ups.

One rank raises, or gets Ctrl-C, in the regularizer, the optimizer's own work, the line
search between evaluations, the elastic averaging's local part, validation, the step
report, checkpointing or the stopping rule (tests/mpi_training_faults_driver.py), for
layer-parallel, data-parallel, EASGD and data x layer training. Every rank must stop in
the same step: the original error where it happened, BraidError naming that rank and
error everywhere else. A hang ends the launch (the driver's per-case watchdog, else
the launch timeout), naming the case.
"""

import pytest
from test_reliability_mpi import launch

#: Stopping "within one step": the victim fails in its second step (FAIL_AT).
FAIL_AT = 2


@pytest.fixture(scope="module", params=[2, 4])
def faults(request, tmp_path_factory):
    nranks = request.param
    res = launch("mpi_training_faults_driver.py", nranks,
                 tmp_path_factory.mktemp("training_faults"), timeout=180)
    return nranks, res


def cases(res):
    return {k: v for k, v in res.items() if "/" in k}


def test_the_ranks_really_ran_together(faults):
    nranks, res = faults
    assert res["size"] == nranks
    assert len(cases(res)) >= 30
    assert all(len(ranks) == nranks for ranks in cases(res).values())


def test_every_rank_stops_in_the_step_that_failed_with_the_error_named(faults):
    nranks, res = faults
    victim, wrong = res["victim"], []
    for name, ranks in cases(res).items():
        expected = "Planted" if name.endswith("/error") else "KeyboardInterrupt"
        said = "Planted: planted fault" if expected == "Planted" else "KeyboardInterrupt"
        kinds = [r["outcome"][0] for r in ranks]
        steps = {r["iteration"] for r in ranks}
        named = all(f"rank {victim}: " in r["outcome"][1] and said in r["outcome"][1]
                    for i, r in enumerate(ranks) if i != victim)
        others = all(k == "BraidError" for i, k in enumerate(kinds) if i != victim)
        if kinds[victim] != expected or not others or not named or len(steps) != 1 or \
                max(steps) > FAIL_AT:
            wrong.append((name, [(r["outcome"], r["iteration"]) for r in ranks]))
    assert not wrong, wrong


def test_every_rank_stops_at_once(faults):
    _, res = faults
    slow = {name: [round(r["seconds"], 2) for r in ranks]
            for name, ranks in cases(res).items() if max(r["seconds"] for r in ranks) > 10}
    assert not slow, slow


@pytest.mark.parametrize("name, field", [
    ("lr", "config.lr"), ("data", "data"), ("network", "network"),
    ("initial parameters", "initial parameters")])
def test_ranks_given_different_training_all_raise_one_clear_error(faults, name, field):
    _, res = faults
    outcomes = res[f"setup:{name}"]
    assert {o[0] for o in outcomes} == {"RankMismatchError"}, outcomes
    assert len({o[1] for o in outcomes}) == 1, outcomes  # the same message everywhere
    assert f"the ranks disagree on the training set-up: {field} " in outcomes[0][1], outcomes


def test_a_bad_argument_on_one_rank_stops_every_rank_at_the_set_up(faults):
    _, res = faults
    victim, outcomes = res["victim"], res["setup:nan data"]
    assert outcomes[victim][0] == "ValueError" and "training features" in outcomes[victim][1]
    for i, o in enumerate(outcomes):
        if i != victim:
            assert o[0] == "BraidError" and f"rank {victim}: ValueError" in o[1], outcomes


def test_a_rank_of_a_sub_communicator_is_named_as_mpiexec_numbers_it(faults):
    nranks, res = faults
    victim, outcomes = res["victim"], res["naming"]
    assert outcomes[victim] == ["Planted", "planted fault"]
    partner = victim - 1  # the other rank of the last pair
    assert outcomes[partner] == ["BraidError", f"a block of the last two ranks failed on "
                                 f"another rank (rank {victim}: Planted: planted fault)"]
