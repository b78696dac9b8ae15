"""braidpy.perf.timeline: a real run's step calls paired with the model's simulated
ones, and the simulation's recorded events (made-up costs; no timing is asserted)."""

import numpy as np
import pytest

from braidpy.adjoint import GradientSolver
from braidpy.nn import ResNet, ResNetApp
from braidpy.perf import Cycle, NetSpec, Strategy, predict
from braidpy.perf.schedule import simulate, solve_program
from braidpy.perf.timeline import Call, compare_timelines, format_comparison, recording
from test_perf_model import made_up


def two_rank_events(record=True):
    progs = solve_program(Cycle(ntime=8, max_levels=2, cfactor=2), 2, 1)
    tl = simulate(progs, lambda op: 1.0 if op.kind == "step" else 0.25,
                  lambda op: 0.5, lambda op, n: 0.125, record=record)
    return progs, tl


def test_simulate_records_every_operation_in_program_order():
    progs, tl = two_rank_events()
    for rank, ops in enumerate(progs):
        mine = [e for e in tl.events if e.rank == rank]
        assert [e.op for e in mine] == list(ops)
        # back to back from 0 to the rank's finish: waits are events too
        assert mine[0].start == 0.0 and mine[-1].end == tl.finish[rank]
        assert all(a.end == pytest.approx(b.start) for a, b in zip(mine, mine[1:]))
    assert any(e.op.kind == "recv" and e.end > e.start for e in tl.events)
    # every rank leaves each allreduce at the same moment
    ends = [[e.end for e in tl.events if e.rank == r and e.op.kind == "allreduce"]
            for r in range(2)]
    assert len(ends[0]) == 3 and ends[0] == ends[1]
    assert two_rank_events(record=False)[1].events == []


def measured_like(events, nranks, shift_rank=None, shift_from=None, shift=0.0):
    """The model's step events as measured calls; calls of ``shift_rank`` from call
    ``shift_from`` on start ``shift`` later."""
    out = [[] for _ in range(nranks)]
    for e in events:
        if e.op.kind == "step":
            k = len(out[e.rank])
            d = shift if e.rank == shift_rank and k >= shift_from else 0.0
            out[e.rank].append(Call(e.op.tag, e.op.rows, e.op.batch, e.start + d, e.end + d))
    return out


def test_the_model_against_itself_differs_nowhere():
    _, tl = two_rank_events()
    c = compare_timelines(measured_like(tl.events, 2), tl.events, tl.makespan, tl.makespan)
    for table in c.calls + c.gaps:
        for measured, model, n in table.values():
            assert measured == pytest.approx(model) and n >= 1
    assert "rank 1:" in format_comparison(c)


def test_a_late_call_is_the_largest_gap_with_the_model_operations_before_it():
    _, tl = two_rank_events()
    calls = measured_like(tl.events, 2, shift_rank=1, shift_from=5, shift=1e-3)
    c = compare_timelines(calls, tl.events, tl.makespan, tl.makespan)
    top = c.largest[0]
    assert (top.rank, top.index) == (1, 5)
    assert top.measured - top.model == pytest.approx(1e-3)
    # the label names what the model has between calls 4 and 5 of rank 1
    mine = [e for e in tl.events if e.rank == 1]
    steps = [i for i, e in enumerate(mine) if e.op.kind == "step"]
    between = {e.op.kind for e in mine[steps[4] + 1:steps[5]]} - {"send"}
    assert top.label == ("+".join(sorted(between)) if between else "none")


def test_a_different_schedule_is_refused_naming_rank_and_call():
    _, tl = two_rank_events()
    calls = measured_like(tl.events, 2)
    with pytest.raises(ValueError, match="rank 0: 13 step calls measured, 14 in the model"):
        compare_timelines([calls[0][:-1], calls[1]], tl.events, 1.0, 1.0)
    wrong = list(calls[1])
    wrong[2] = Call("adj", wrong[2].rows, wrong[2].batch, wrong[2].start, wrong[2].end)
    with pytest.raises(ValueError, match="rank 1, call 2: measured adj"):
        compare_timelines([calls[0], wrong], tl.events, 1.0, 1.0)


def _recorded_and_predicted(layers, samples, width, levels, cf, oneshot):
    """A warm GradientSolver gradient of a recording ResNetApp (its calls) and the
    model's prediction of the same gradient (recorded)."""
    net = ResNet((2,), 3, width=width, nlayers=layers)
    params = net.init_params(seed=1, scale=0.1)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((samples, 2))
    C = np.eye(3)[rng.integers(0, 3, samples)]
    app = recording(ResNetApp)(net, params, X, C)
    solver = GradientSolver(app, 0.0, net.tstop, layers, oneshot=oneshot,
                            primal={"max_levels": levels, "cfactor": cf})
    solver.evaluate()  # warm, as the model predicts training's gradients
    app.calls = []
    solver.evaluate()
    solver.close()
    s = Strategy(1, 1, 1, Cycle(ntime=layers, max_levels=levels, cfactor=cf, batched=True),
                 oneshot)
    pred = predict(NetSpec("dense", (width,), layers, samples), s, made_up(step=1e-3),
                   record=True)
    return app.calls, pred


def _same_steps(calls, pred):
    model_steps = [e.op for e in pred.timeline.events if e.op.kind == "step"]
    return [(x.tag, x.rows, x.batch) for x in calls] == \
        [(op.tag, op.rows, op.batch) for op in model_steps]


@pytest.mark.parametrize("levels,cf", [(1, 4), (2, 4), (3, 2)])
def test_a_real_gradient_pairs_with_the_model_call_for_call(levels, cf):
    """The recorded calls of GradientSolver.evaluate (primal, adjoint, the batched
    gradient) are the model's step operations one for one: tag, batch and states."""
    calls, pred = _recorded_and_predicted(16, 4, 4, levels, cf, (2, 2))
    c = compare_timelines([calls], pred.timeline.events, calls[-1].end,
                          pred.timeline.makespan)
    assert _same_steps(calls, pred)
    assert sum(n for _, _, n in c.calls[0].values()) == len(calls)


@pytest.mark.parametrize("levels", [1, 2])
def test_large_states_gradient_calls_pair_with_the_model(levels):
    """States of 320 KB: the gradient calls go by position (levels 2) or, stacked, in
    the solver's chunks of 4 MiB (levels 1: 13 + 13 + 6 of 32); the model makes the same
    calls (``braidpy calibrate --samples ... 5000`` had failed on the difference)."""
    calls, pred = _recorded_and_predicted(32, 5000, 8, levels, 4, (1, 1))
    grads = [x.rows for x in calls if x.tag == "grad"]
    assert grads == ([13, 13, 6] if levels == 1 else [8, 8, 8, 8])
    assert _same_steps(calls, pred)


def test_recording_keeps_the_apps_capabilities():
    cls = recording(ResNetApp)
    assert issubclass(cls, ResNetApp) and cls.__name__ == "RecordingResNetApp"
    assert not hasattr(cls, "step_batch_items")
    # an app without a stacked step does not gain one (the core would batch it)
    import braidpy

    class Plain(braidpy.App):
        def init(self, t):
            return np.zeros(1)

        def step(self, u, t0, t1, status):
            return u

    assert getattr(recording(Plain), "step_stacked", None) is None
