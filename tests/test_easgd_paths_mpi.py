"""Asynchronous EASGD when ranks take different paths, at 1, 2 and 4 ranks
(tests/mpi_paths_driver.py, cases ``easgd_*``; rank 0 is the centre, the last rank the
odd worker).

A worker that leaves without ending its session, one that steps once more after the
centre stopped serving, one busy in its own code past ``BRAIDPY_TIMEOUT``, one given
another option, centre or number of parameters: every rank ends, under the launch's
kill timeout, with an error naming the rank (before, each of these left a rank waiting
for ever). On one rank there is no centre and worker: AsyncEASGD refuses at once.
"""

import pytest
from test_paths_mpi import SHORT_DEADLINE, launch

SIZE_ERROR = ("training stopped: worker rank {odd} failed (asynchronous EASGD): it sent 4 "
              "parameters where the centre holds 3 (every worker must train the same "
              "parameters)")


@pytest.fixture(params=[2, 4])
def nranks(request):
    return request.param


def test_on_one_rank_there_is_no_centre_and_worker(tmp_path):
    proc, outcomes, _ = launch(tmp_path, 1, "easgd_worker_leaves")
    assert proc.returncode != 0
    assert outcomes == [["ValueError", "AsyncEASGD needs a centre rank and at least one "
                                       "worker: a communicator of >= 2 ranks, got 1"]]


def test_a_worker_leaving_without_ending_its_session_is_named_by_every_rank(tmp_path,
                                                                            nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "easgd_worker_leaves")
    odd = nranks - 1
    assert proc.returncode != 0
    assert outcomes[odd] == ["ok"]
    for rank, outcome in enumerate(outcomes[:odd]):  # the centre and the other workers
        assert outcome == ["BraidError", f"training stopped: worker rank {odd} failed "
                                         f"(asynchronous EASGD): rank {odd} left the program "
                                         f"(its braidpy calls: none)"], (rank, outcomes)


def test_a_worker_stepping_once_more_is_told_the_centre_left(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "easgd_step_once_more")
    odd = nranks - 1
    assert proc.returncode != 0
    assert outcomes[:odd] == [["ok"]] * odd, outcomes
    assert outcomes[odd] == ["BraidError", f"rank {odd} waits in an asynchronous EASGD "
                                           f"exchange with the centre (its step 21) for a "
                                           f"rank that will not join it: rank 0 left the "
                                           f"program (its braidpy calls: none)"], outcomes


def test_a_worker_busy_past_the_deadline_is_named_and_every_rank_stops(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "easgd_worker_busy", SHORT_DEADLINE)
    odd = nranks - 1
    assert proc.returncode != 0
    gave_up = (f"the asynchronous EASGD centre (rank 0) heard nothing for {SHORT_DEADLINE} s "
               f"(BRAIDPY_TIMEOUT) from worker rank(s) {odd}: rank {odd} is in no braidpy "
               f"wait")
    assert outcomes[0][0] == "BraidError" and outcomes[0][1].startswith(gave_up), outcomes
    for outcome in outcomes[1:odd]:  # finished, then told by the centre's verdict
        assert outcome[0] == "BraidError", outcomes
        assert outcome[1].startswith("training stopped: the centre rank 0 failed "
                                     f"(asynchronous EASGD): BraidError: {gave_up}"), outcomes
    # The busy worker, back from its own code, hears at its next exchange.
    assert outcomes[odd][0] == "BraidError", outcomes
    assert outcomes[odd][1].startswith(f"rank {odd} waits in an asynchronous EASGD exchange "
                                       f"with the centre (its step 6) for a rank that will "
                                       f"not join it: the centre gave up: {gave_up}"), outcomes


@pytest.mark.parametrize("case, field", [("easgd_option_differs", "tau is 1 on rank"),
                                         ("easgd_centre_differs", "centre is 0 on rank")])
def test_an_option_or_centre_differing_on_one_rank_is_one_error_everywhere(tmp_path, nranks,
                                                                           case, field):
    proc, outcomes, _ = launch(tmp_path, nranks, case)
    odd = nranks - 1
    assert proc.returncode != 0
    assert {o[0] for o in outcomes} == {"RankMismatchError"}, outcomes
    assert len({o[1] for o in outcomes}) == 1, outcomes
    text = outcomes[0][1]
    assert text.startswith("the ranks disagree on the asynchronous EASGD set-up: "), text
    assert field in text and f"on rank {odd} (every rank must make AsyncEASGD" in text, text


def test_a_worker_with_another_number_of_parameters_is_named_by_every_rank(tmp_path,
                                                                           nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "easgd_size_differs")
    odd = nranks - 1
    assert proc.returncode != 0
    for outcome in outcomes:
        assert outcome == ["BraidError", SIZE_ERROR.format(odd=odd)], outcomes
