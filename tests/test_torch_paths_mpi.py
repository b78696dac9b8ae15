"""A rank that skips or repeats a ``braidpy.torch.LayerParallel`` backward, at 1, 2 and 4
ranks (tests/mpi_paths_driver.py, cases ``lp_*``).

LayerParallel's forward and backward open with an entry agreement
(braidpy.parallel.paths): a rank that skips ``backward()`` (its peers call it) meets
their backward with its next forward, and one that calls it twice meets their next
forward with its second backward; every rank raises BraidError naming that rank and the
call. A rank that skips the backward and leaves is named by its peers through its exit
notice. Serially the same programs run as plain torch would. Before the agreement, the
skipped backward left every rank waiting for ever.
"""

import pytest
from test_paths_mpi import launch

pytest.importorskip("torch")


@pytest.fixture(params=[1, 2, 4])
def nranks(request):
    return request.param


def calls(rank, name, nth, total):
    return (f"rank {rank} called LayerParallel.{name} (its {nth} LayerParallel.{name}, "
            f"call #{total} on this communicator)")


def test_a_rank_skipping_backward_is_named_on_every_rank(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "lp_skip_backward")
    if nranks == 1:  # nothing to disagree with: the program runs on
        assert proc.returncode == 0 and outcomes == [["ok"]], (outcomes, proc.stderr)
        return
    odd = nranks - 1
    assert proc.returncode != 0
    for outcome in outcomes:
        assert outcome[0] == "BraidError", outcomes
        text = outcome[1]
        assert text.startswith(f"the ranks took different paths through braidpy: rank {odd} "
                               f"skipped backward() after its forward #2 (it called forward "
                               f"#3 while other ranks called backward): "), text
        for rank in range(odd):  # every rank's call is named: they met in one exchange
            assert calls(rank, "backward", "2nd", 4) in text, text
        assert calls(odd, "forward", "3rd", 4) in text, text
        assert "every rank calls backward() once after a forward" in text, text


def test_a_rank_calling_backward_twice_is_named_on_every_rank(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "lp_backward_twice")
    if nranks == 1:
        assert proc.returncode == 0 and outcomes == [["ok"]], (outcomes, proc.stderr)
        return
    odd = nranks - 1
    assert proc.returncode != 0
    for outcome in outcomes:
        assert outcome[0] == "BraidError", outcomes
        text = outcome[1]
        assert text.startswith(f"the ranks took different paths through braidpy: rank {odd} "
                               f"called backward() twice after its forward #2 (other ranks "
                               f"called forward #3): "), text
        for rank in range(odd):
            assert calls(rank, "forward", "3rd", 5) in text, text
        assert calls(odd, "backward", "3rd", 5) in text, text


def test_a_rank_skipping_backward_and_leaving_is_named_by_its_peers(tmp_path, nranks):
    proc, outcomes, _ = launch(tmp_path, nranks, "lp_skip_backward_and_leave")
    if nranks == 1:
        assert proc.returncode == 0 and outcomes == [["ok"]], (outcomes, proc.stderr)
        return
    odd = nranks - 1
    assert proc.returncode != 0
    assert outcomes[odd] == ["ok"]
    waits = "LayerParallel.backward (call #4 on this communicator)"
    for rank, outcome in enumerate(outcomes[:odd]):
        assert outcome[0] == "BraidError", (rank, outcome)
        assert f"rank {rank} waits in {waits} for a rank that will not join it: rank {odd} " \
               f"left the program" in outcome[1], outcome
        for did in (f"LayerParallel.forward x2 ({nranks} ranks)",
                    f"LayerParallel.backward x1 ({nranks} ranks)"):
            assert did in outcome[1], outcome  # its calls, as it told them
    assert f"rank {odd} left the program while other ranks wait for it (rank 0 waits in " \
           f"{waits}" in proc.stderr, proc.stderr[-3000:]
