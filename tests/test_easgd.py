"""Synchronous EASGD: under mpiexec at 1, 2 and 4 ranks, against a
simulation of the paper's equations written independently here, and against the
consensus fixed point."""

import numpy as np
import pytest
from easgd_cases import CASES, target
from mpi_launch import launch

from braidpy.train.easgd import SyncEASGD


def simulate(groups, tau, momentum, steps, lr=0.1, rho=0.5):
    """You, Buluç and Demmel, "Scaling deep learning on GPU and Knights Landing clusters"
    (SC 2017), equations (1)-(2) and (5)-(6), for all groups at once."""
    W = np.zeros((groups, 3))
    V = np.zeros_like(W)
    C = np.zeros(3)
    targets = np.array([target(i) for i in range(groups)])
    for t in range(1, steps + 1):
        G = W - targets
        comm = t % tau == 0
        diff = W - C
        if momentum:
            V = momentum * V - lr * G
            W = W + V - (lr * rho * diff if comm else 0.0)
        else:
            W = W - lr * (G + (rho * diff if comm else 0.0))
        if comm:
            C = C + lr * rho * diff.sum(axis=0)
    return W, C


@pytest.fixture(scope="module", params=[1, 2, 4])
def run(request, tmp_path_factory):
    nranks = request.param
    return nranks, launch("mpi_easgd_driver.py", nranks, tmp_path_factory.mktemp("easgd"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_the_papers_equations(run, case):
    nranks, res = run
    W, C = simulate(nranks, **CASES[case])
    for rank, r in enumerate(res[case]):
        np.testing.assert_allclose(r["w"], W[rank], rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(r["center"], C, rtol=1e-13, atol=1e-13)
    # Every rank holds the same centre, bit for bit (computed from one allreduce).
    assert all(r["center"] == res[case][0]["center"] for r in res[case])


def test_the_centre_reaches_the_consensus(run):
    # Fixed point of (1)-(2) with tau = 1: W_i = (c_i + rho C) / (1 + rho), C = mean c_i.
    nranks, res = run
    mean = np.mean([target(i) for i in range(nranks)], axis=0)
    for r in res["plain_tau1"]:
        np.testing.assert_allclose(r["center"], mean, rtol=0, atol=1e-8)


def test_options_are_checked_and_state_round_trips():
    with pytest.raises(ValueError, match="tau must be an int >= 1, got 0"):
        SyncEASGD(None, tau=0)
    with pytest.raises(ValueError, match="rho must be a number >= 0.0, got -1"):
        SyncEASGD(None, rho=-1)
    with pytest.raises(ValueError, match="lr \\* rho \\* groups = 1 must be < 1"):
        SyncEASGD(None, lr=0.5, rho=2.0)
    a, b = SyncEASGD(None, momentum=0.5, tau=2), SyncEASGD(None, momentum=0.5, tau=2)
    wa = np.ones(3)
    for _ in range(3):
        a.step(wa, 0.0, wa - 2.0)
    wb = wa.copy()
    b.load_state_dict(a.state_dict())
    for _ in range(3):
        a.step(wa, 0.0, wa - 2.0)
        b.step(wb, 0.0, wb - 2.0)
    np.testing.assert_array_equal(wa, wb)
    np.testing.assert_array_equal(a.center, b.center)


@pytest.mark.parametrize("change, message", [
    (dict(center=np.ones(4)), "field 'center' must hold a vector of 3 numbers"),
    (dict(velocity=np.ones((3, 1))), "field 'velocity' must hold a vector of 3 numbers"),
    (dict(center=[1.0, np.nan, 0.0]), "field 'center' holds non-finite numbers"),
    (dict(center="abc"), "field 'center' must hold numbers"),
    (dict(steps=-1), "field 'steps' must be an int >= 0, got -1"),
    (dict(steps=2.5), "field 'steps' must be an int >= 0, got 2.5"),
])
def test_a_bad_saved_state_is_refused_naming_the_field(change, message):
    a = SyncEASGD(None, momentum=0.5)
    w = np.ones(3)
    a.step(w, 0.0, w - 2.0)
    state = {**a.state_dict(), **change}
    b = SyncEASGD(None, momentum=0.5)
    with pytest.raises(ValueError, match=message.replace("(", "\\(")):
        b.load_state_dict(state, nparams=3)
    assert b.center is None and b.steps == 0  # nothing half-loaded


class _GroupsComm:
    """Just enough of a data communicator for the constructor: its rank and size."""

    def __init__(self, size):
        self.size = size

    def Get_rank(self):
        return 0

    def Get_size(self):
        return self.size


@pytest.mark.parametrize("groups", [3, 4])
def test_the_stability_bound_counts_the_groups(groups):
    """lr * rho * groups < 1 (the centre's update sums every group's pull): with several
    groups a pair that one group alone would accept (lr * rho < 1) is refused."""
    lr = 0.125
    # lr * rho * groups == 1 exactly (0.125 * 8 / groups * groups), and above it.
    for rho in (8.0 / groups, 9.0 / groups):
        assert lr * rho < 1.0 <= lr * rho * groups
        with pytest.raises(ValueError, match=r"lr \* rho \* groups = .* must be < 1 .*"
                                             rf"{groups} data group\(s\)"):
            SyncEASGD(_GroupsComm(groups), lr=lr, rho=rho)
    # Just inside the bound is accepted, and the same pair is fine for one group.
    rho = 7.0 / groups
    assert lr * rho * groups < 1.0
    opt = SyncEASGD(_GroupsComm(groups), lr=lr, rho=rho)
    assert opt.groups == groups
    SyncEASGD(None, lr=lr, rho=9.0 / groups)


@pytest.fixture(scope="module", params=[2, 4])
def async_run(request, tmp_path_factory):
    nranks = request.param
    return nranks, launch("mpi_async_easgd_driver.py", nranks,
                          tmp_path_factory.mktemp("async-easgd"))


def test_async_workers_and_centre_reach_the_consensus(async_run):
    nranks, res = async_run
    records = res["train"]
    assert [r["outcome"][0] for r in records] == ["ok"] * nranks, records
    workers = range(1, nranks)
    # Replay the paper's updates in the order the centre served them (each worker
    # blocks on its exchange, so that order fixes every number): bit for bit.
    center, W = np.zeros(3), {i: np.zeros(3) for i in workers}
    for i in records[0]["served"]:
        received = center.copy()
        center += 0.1 * 0.5 * (W[i] - center)
        elastic = 0.5 * (W[i] - received)
        W[i] -= 0.1 * (W[i] - target(i))
        W[i] -= 0.1 * elastic
    assert records[0]["center"] == center.tolist()
    for i in workers:
        assert records[i]["w"] == W[i].tolist()
    # With one worker the centre converges to its minimiser.
    if nranks == 2:
        np.testing.assert_allclose(center, target(1), rtol=0, atol=1e-6)
    # Every exchange was served once: the centre's count is the workers' total.
    assert records[0]["exchanges"] == sum(records[i]["exchanges"] for i in workers) \
        == (nranks - 1) * 600


def test_an_async_worker_failing_stops_every_rank(async_run):
    nranks, res = async_run
    records = res["failure"]
    failed = nranks - 1
    assert records[failed]["outcome"] == ["Boom", "worker failed on purpose"]
    for r in records[:failed]:
        assert r["outcome"][0] == "BraidError", records
        # The worker's own error travels with the stop: rank 0 (which prints) names it.
        assert r["outcome"][1] == (f"training stopped: worker rank {failed} failed "
                                   f"(asynchronous EASGD): Boom: worker failed on purpose")


def test_the_async_centre_failing_stops_every_rank(async_run):
    """The centre raising inside its serving loop answers every worker "stop" (none is
    left waiting for it) and then raises its own exception."""
    nranks, res = async_run
    records = res["centre failure"]
    assert records[0]["outcome"] == ["Boom", "centre failed on purpose"], records
    for r in records[1:]:
        assert r["outcome"][0] == "BraidError", records
        assert r["outcome"][1].endswith("the centre rank 0 failed (asynchronous EASGD): "
                                        "Boom: centre failed on purpose")


def test_ctrl_c_on_the_async_centre_stops_every_rank_at_once(async_run):
    """The centre polls for messages, so a deferred Ctrl-C is taken at once (it used to
    wait in MPI's Probe and serve every worker to the end before raising)."""
    nranks, res = async_run
    records = res["centre ctrl-c"]
    assert records[0]["outcome"][0] == "KeyboardInterrupt", records
    for r in records[1:]:
        assert r["outcome"][0] == "BraidError", records
        assert r["outcome"][1].endswith("the centre rank 0 failed (asynchronous EASGD): "
                                        "KeyboardInterrupt")
    # Served 4 updates, then stopped: nowhere near the 600 steps each worker would take.
    assert records[0]["exchanges"] < 4 + 10 * nranks, records[0]["exchanges"]


def test_async_options_are_checked():
    from braidpy.train.easgd import AsyncEASGD

    with pytest.raises(ValueError, match="a communicator of >= 2 ranks, got 1"):
        AsyncEASGD(None)
