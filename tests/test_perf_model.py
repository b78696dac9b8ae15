"""braidpy.perf: the calibration file, the model per gradient, the plan, and the
calibrate / plan command line, with a made-up calibration (no clocks are read)."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from braidpy.perf import (CLUSTERS, Calibration, CalibrationError, CostFit, Cycle,
                          LayerCosts, Link, NetSpec, Strategy, factorizations,
                          load_calibration, network_spec, plan, predict, save_calibration)
from braidpy.perf.calibration import calibration_from_json
from braidpy.perf.model import allreduce_seconds, memory_per_rank
from braidpy.perf.schedule import program_counts, solve_program
from cli_runner import in_process
from mpi_process import run_mpi

ENV = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")


def flat(seconds):
    """A fit without points: every call costs ``seconds`` whatever its size."""
    return CostFit(seconds, 0.0)


def made_up(step=1.0, vec=0.0, callback=0.0, solve=0.0, alpha=0.0, beta=0.0):
    layers = (LayerCosts("dense-w4", "dense", (4,), 1,
                         {"fwd": flat(step), "adj": flat(step), "grad": flat(step),
                          "vec": flat(vec)}),
              LayerCosts("conv-c2-8x8-k3", "conv", (2, 8, 8), 3,
                         {"fwd": CostFit(0.0, 1e-3), "adj": CostFit(0.0, 1e-3),
                          "grad": CostFit(0.0, 1e-3), "vec": flat(0.0)}))
    link = Link(alpha, beta, "assumed: test")
    return Calibration(layers, callback, link, link, solve_s=solve)


# ------------------------------------------------------------ the file
def test_calibration_round_trip(tmp_path):
    cal = made_up(step=2e-4, vec=1e-6, callback=1e-6, solve=1e-4, alpha=1e-6, beta=1e-9)
    path = tmp_path / "cal.json"
    save_calibration(cal, str(path))
    assert load_calibration(str(path)) == cal
    assert json.loads(path.read_text())["version"] == 1


def test_measured_glue_round_trips_and_older_files_load_without_it(tmp_path):
    cal = made_up()
    assert "glue" not in cal.to_json()["layers"][0]  # what older files look like
    assert cal.layers[0].glue is None and cal.layers[0].vec_scale == cal.layers[0].sweep_batched
    measured = LayerCosts(**{**cal.layers[0].__dict__,
                             "glue": CostFit(2e-6, 5e-9, ((1, 16, 2e-6), (8, 16, 6e-6))),
                             "vec_factor": 1.6, "fixed": CostFit(3e-4, 1e-7),
                             "stack": CostFit(4e-5, 6e-9),
                             "fixed_parallel": CostFit(1e-4, 1e-6),
                             "concurrency": ((1, 1.0), (2, 1.1), (4, 1.3)),
                             "sweep_grad": 1.07,
                             "serial": CostFit(1e-6, 2e-8, ((1, 16, 1.3e-6),))})
    cal = Calibration((measured,) + cal.layers[1:], cal.callback_s, cal.p2p, cal.allreduce)
    cal = Calibration(cal.layers, cal.callback_s, cal.p2p, cal.allreduce,
                      message_software=Link(6e-6, 2e-10, "measured: test"), agreement_s=5e-6)
    save_calibration(cal, str(tmp_path / "glue.json"))
    back = load_calibration(str(tmp_path / "glue.json"))
    assert back == cal and back.layers[0].vec_scale == 1.6


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d["layers"][0].update(glue={"a": -1.0, "b": 0.0}),
     "layers[0].glue.a must be a finite number"),
    (lambda d: d["layers"][0].update(vec_factor=0.0), "layers[0].vec_factor must be a finite"),
    (lambda d: d["layers"][0].update(fixed={"a": "slow", "b": 0.0}),
     "layers[0].fixed.a must be a finite number"),
    (lambda d: d["layers"][0].update(stack={"a": 1e-5}), "missing field layers[0].stack.b"),
    (lambda d: d["layers"][0].update(concurrency=[[1, 1.0], [4, 1.2], [2, 1.1]]),
     "layers[0].concurrency must be a list of [busy ranks, factor] with increasing"),
    (lambda d: d["layers"][0].update(concurrency=[[1, 1.0], [2, 0.0]]),
     "layers[0].concurrency must be a list"),
    (lambda d: d["layers"][0].update(concurrency={"2": 1.1}),
     "layers[0].concurrency must be a list"),
    (lambda d: d["layers"][0].update(sweep_grad=0), "layers[0].sweep_grad must be a finite"),
    (lambda d: d["layers"][0].update(serial={"a": 1e-6}), "missing field layers[0].serial.b"),
    (lambda d: d.update(software={"message": {"alpha": 1e-6, "beta": -1.0,
                                              "source": "x"}, "agreement_s": 0.0}),
     "software.message.beta must be a finite number"),
    (lambda d: d.update(software={"message": {"alpha": 1e-6, "beta": 0.0,
                                              "source": "x"}}),
     "missing field software.agreement_s"),
    (lambda d: d.pop("layers"), "missing field calibration.layers"),
    (lambda d: d.update(version=7), "calibration.version is 7"),
    (lambda d: d.update(format="pickle"), "calibration.format is 'pickle'"),
    (lambda d: d.update(callback_s=-1), "calibration.callback_s must be a finite number"),
    (lambda d: d["layers"][0].update(kind="lstm"), "layers[0].kind must be 'dense' or 'conv'"),
    (lambda d: d["layers"][1].update(shape=[2, 8]), "layers[1].shape must be 3 positive ints"),
    (lambda d: d["layers"][0]["costs"].pop("adj"), "missing field layers[0].costs.adj"),
    (lambda d: d["layers"][0]["costs"]["fwd"].update(a="fast"),
     "layers[0].costs.fwd.a must be a finite number"),
    (lambda d: d["network"]["p2p"].pop("alpha"), "missing field network.p2p.alpha"),
    (lambda d: d["network"].update(nranks=0), "network.nranks must be an int >= 1"),
])
def test_a_bad_field_is_named(mutate, message):
    data = made_up().to_json()
    mutate(data)
    with pytest.raises(CalibrationError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace(".", r"\.")):
        calibration_from_json(data)


#: A layer as files written before 2026-11-29 held it: with what ranks sharing cores cost.
_SHARING_FIELDS = {"oversubscription": [2.0, 1.25], "oversubscription_space": [2.0, 1.3],
                   "oversubscription_samples": [[500, 1.3], [2000, 1.1]]}


def test_an_older_file_with_the_sharing_factors_loads_and_predicts(tmp_path):
    """The factors for ranks sharing cores are no longer modelled: a file that has them
    loads without a warning (unknown fields are ignored) and predicts as the same file
    without them, with more ranks than cores too."""
    import warnings

    cal = made_up(step=1e-4, alpha=1e-6)
    data = cal.to_json()
    for layer in data["layers"]:
        layer.update(_SHARING_FIELDS)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old = load_calibration(str(path))
    assert old == cal
    net = NetSpec("dense", (4,), 8, 10)
    for P, cores in ((2, None), (4, 2)):
        got = predict(net, strategy(P), old, cores=cores)
        assert got.seconds == predict(net, strategy(P), cal, cores=cores).seconds > 0
    # and so does the command line
    status = subprocess.run([sys.executable, "-m", "braidpy", "plan", "--calibration",
                             str(path), "--network", "dense:4:8", "-P", "4", "--cores", "2"],
                            capture_output=True, text=True, env=ENV, timeout=120)
    assert status.returncode == 0 and not status.stderr, status.stderr
    assert "more ranks than cores: a lower bound, not validated" in status.stdout


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(CalibrationError, match="not found"):
        load_calibration(str(tmp_path / "none.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CalibrationError, match="is not JSON"):
        load_calibration(str(bad))


def test_cost_fit_interpolates_over_samples_then_rows():
    fit = CostFit.fit([(1, 10, 1.0), (1, 1000, 3.0), (4, 10, 2.0), (4, 1000, 30.0)])
    assert fit.seconds(4, 1000) == pytest.approx(30.0)
    assert fit.seconds(2, 10) == pytest.approx(math.sqrt(2.0))  # log-log: halfway
    assert fit.seconds(8, 1000) == pytest.approx(60.0)


def test_cost_fit_interpolates_its_points():
    fit = CostFit.fit([(1, 10, 1.0), (1, 100, 2.0), (1, 1000, 20.0)])
    assert fit.seconds(1, 10) == pytest.approx(1.0)
    assert fit.seconds(1, 100) == pytest.approx(2.0)
    assert fit.seconds(2, 100) == pytest.approx(4.0)  # more rows than measured: in proportion
    assert fit.seconds(1, 2000) == pytest.approx(40.0)  # proportional beyond
    assert fit.seconds(1, 1) == pytest.approx(1.0)  # the fixed cost below
    assert 2.0 < fit.seconds(1, 300) < 20.0
    assert fit.a >= 0 and fit.b > 0


def weighted_lstsq(points, columns):
    """min sum_i w_i (t_i - A_i c)^2 with w_i = 1 / t_i^2, by numpy's lstsq on the rows
    scaled by sqrt(w_i); A's columns are picked from (1, rows * samples)."""
    x = np.array([r * s for r, s, _ in points], dtype=float)
    t = np.array([p[2] for p in points], dtype=float)
    A = np.column_stack([np.ones_like(x), x])[:, columns]
    root_w = 1.0 / t
    return np.linalg.lstsq(A * root_w[:, None], t * root_w, rcond=None)[0]


def test_cost_fit_weights_by_relative_error():
    """The line is the 1 / seconds^2 weighted least-squares fit (both coefficients
    positive here: no clamp), which the unweighted fit is not."""
    points = [(1, 1, 1.0), (2, 5, 2.0), (4, 25, 30.0)]
    a, b = weighted_lstsq(points, [0, 1])
    assert a > 0 and b > 0
    fit = CostFit.fit(points)
    assert (fit.a, fit.b) == (pytest.approx(a, rel=1e-12), pytest.approx(b, rel=1e-12))
    slope, intercept = np.polyfit([1.0, 10.0, 100.0], [1.0, 2.0, 30.0], 1)
    assert abs(fit.a - intercept) > 0.3 and abs(fit.b - slope) > 0.05
    assert fit.points == ((1, 1, 1.0), (2, 5, 2.0), (4, 25, 30.0))


def test_cost_fit_clamps_a_falling_slope_to_a_constant():
    """Seconds falling with the size: the slope is clamped to 0 and the fixed cost is
    the weighted best constant (the weighted mean of the seconds)."""
    points = [(1, 1, 3.0), (2, 5, 2.0), (4, 25, 1.0)]
    assert weighted_lstsq(points, [0, 1])[1] < 0
    (a,) = weighted_lstsq(points, [0])
    fit = CostFit.fit(points)
    assert fit.b == 0.0
    assert fit.a == pytest.approx(a, rel=1e-12)
    assert a == pytest.approx((1 / 3 + 1 / 2 + 1) / (1 / 9 + 1 / 4 + 1), rel=1e-12)


def test_cost_fit_refits_through_the_origin_when_the_intercept_is_negative():
    """A negative intercept is clamped to 0 and the slope refitted through the origin
    (weighted), not kept from the line with the negative intercept."""
    points = [(1, 1, 0.1), (2, 5, 5.0), (4, 25, 60.0)]
    a_line, b_line = weighted_lstsq(points, [0, 1])
    assert a_line < 0
    (b,) = weighted_lstsq(points, [1])
    fit = CostFit.fit(points)
    assert fit.a == 0.0
    assert fit.b == pytest.approx(b, rel=1e-12)
    assert abs(fit.b - b_line) > 0.4  # the refit moved it
    # Through the origin with weights 1 / t^2: b = sum(x / t) / sum(x^2 / t^2).
    assert b == pytest.approx((1 / 0.1 + 10 / 5 + 100 / 60) /
                              (1 / 0.01 + 100 / 25 + 1e4 / 3600), rel=1e-12)


def test_uncalibrated_shapes_scale_by_multiply_adds():
    cal = made_up()
    layer, scale = cal.layer("conv", (4, 8, 8), 3)
    assert layer.name == "conv-c2-8x8-k3" and scale == 4.0
    with pytest.raises(CalibrationError, match="no conv layers"):
        Calibration(cal.layers[:1], 0.0, cal.p2p, cal.allreduce).layer("conv", (2, 8, 8))


# ----------------------------------------------------------- the model
def strategy(P, L=2, cf=2, its=(1, 1), data=1, space=1, batched=False):
    return Strategy(data, space, P, Cycle(ntime=8, max_levels=L, cfactor=cf,
                                          batched=batched), its)


def test_one_gradient_by_hand():
    # N 8, cf 2, 2 levels, one rank, unit costs, one-shot (1, 1): opening 1, primal 28
    # (test_perf_schedule; warm: no initial-guess work), classifier 2, adjoint 28,
    # 8 gradient steps, opening gradient 1.
    net = NetSpec("dense", (4,), 8, 10)
    pred = predict(net, strategy(1), made_up())
    assert pred.seconds == 1 + 28 + 2 + 28 + 8 + 1
    assert pred.parts["fwd"] == 28 and pred.parts["adj"] == 28 and pred.parts["grad"] == 8


def test_a_line_search_trial_by_hand():
    # The gradient above (68) and, per trial, the opening of the new parameters 1, the
    # state solve without its final F-sweep (28 - 4: the last point is a C-point) and
    # the loss 1.
    net = NetSpec("dense", (4,), 8, 10)
    pred = predict(net, strategy(1), made_up(), trials=2)
    assert pred.seconds == 68 and pred.parts["fwd"] == 28
    assert pred.trial_seconds == 1 + 24 + 1
    assert pred.step_seconds == 68 + 2 * 26
    assert predict(net, strategy(1), made_up()).step_seconds == 68  # per gradient
    # Two ranks: a trial is one state solve's share of the gradient's path, less its
    # final sweep; the messages of the coarse relay stay.
    two = predict(net, strategy(2), made_up(alpha=0.5), trials=1)
    assert 0 < two.trial_seconds < two.seconds / 2
    assert two.step_seconds == two.seconds + two.trial_seconds
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="trials must be a finite number >= 0"):
            predict(net, strategy(1), made_up(), trials=bad)


def test_glue_and_fixed_costs_enter_by_hand():
    """A measured calibration's glue (before every step call), fixed seconds per
    gradient and vector factor add exactly what they say to the by-hand gradient."""
    net = NetSpec("dense", (4,), 8, 10)
    plain = made_up(vec=0.25)
    lc = plain.layers[0]
    glued = Calibration((LayerCosts(**{**lc.__dict__, "glue": CostFit(0.5, 0.0),
                                       "vec_factor": 2.0, "fixed": CostFit(3.0, 0.0)}),)
                        + plain.layers[1:], 0.0, plain.p2p, plain.allreduce)
    before = predict(net, strategy(1), plain, record=True)
    after = predict(net, strategy(1), glued, record=True)
    steps = sum(e.op.kind == "step" for e in after.timeline.events)
    vec = before.parts["vec"] / lc.sweep_batched
    assert steps == 28 + 28 + 8
    assert after.parts["glue"] == 0.5 * steps and after.parts["fixed"] == 3.0
    assert after.parts["vec"] == pytest.approx(2.0 * vec)
    assert after.seconds == pytest.approx(before.seconds + 0.5 * steps + 3.0 +
                                          (2.0 - lc.sweep_batched) * vec)
    # batched: the states stacked for the one gradient call (small states: not split by
    # position, braidpy.adjoint.gradient_groups) are copies, priced as glue
    batched = predict(net, strategy(1, batched=True), glued, record=True)
    glue_ops = [e.op for e in batched.timeline.events if e.op.tag == "glue"]
    calls = sum(e.op.kind == "step" for e in batched.timeline.events)
    assert len(glue_ops) == calls + 1 and batched.parts["glue"] == 0.5 * (calls + 1)
    stack = [op for op in glue_ops if op.rows == 2 * 8]
    assert len(stack) == 1  # 2 states for each of the 8 layers' gradients


def test_gradient_calls_read_f_point_positions_in_place():
    """With states of 1 MiB and more (braidpy.adjoint.POSITION_MIN_BYTES per position)
    and cf 4 (N 8), one gradient call per position, and those whose primal states and
    adjoint values are both F-points (steps 1, 5 and 2, 6) are read in place: no
    stacking before their calls; on a device one call, stacked; small states one call."""
    net = NetSpec("dense", (4,), 8, 2 ** 15)  # 1 MiB states
    plain = made_up()
    lc = plain.layers[0]
    glued = Calibration((LayerCosts(**{**lc.__dict__, "glue": CostFit(0.5, 0.0)}),)
                        + plain.layers[1:], 0.0, plain.p2p, plain.allreduce)
    pred = predict(net, strategy(1, cf=4, batched=True), glued, record=True)
    ops = [e.op for e in pred.timeline.events]
    grads = [k for k, op in enumerate(ops) if op.tag == "grad"]
    assert [ops[k].rows for k in grads] == [2, 2, 2, 2]
    stacked = [ops[k - 2].tag == "glue" and ops[k - 2].rows == 4 for k in grads]
    assert stacked == [True, False, False, True]  # positions 0 (primal C), 3 (adjoint C)
    on_device = dataclasses.replace(glued, device="cuda:0")
    pred = predict(net, strategy(1, cf=4, batched=True), on_device, record=True)
    assert [e.op.rows for e in pred.timeline.events if e.op.tag == "grad"] == [8]
    small = predict(NetSpec("dense", (4,), 8, 10), strategy(1, cf=4, batched=True), glued,
                    record=True)
    assert [e.op.rows for e in small.timeline.events if e.op.tag == "grad"] == [8]


def test_fixed_parallel_costs_enter_only_across_ranks():
    """``fixed_parallel`` adds its seconds once per gradient on every layer rank when
    there are several, nothing on one rank."""
    net = NetSpec("dense", (4,), 8, 10)
    plain = made_up()
    lc = plain.layers[0]
    more = Calibration((LayerCosts(**{**lc.__dict__, "fixed_parallel": CostFit(0.5, 0.1)}),)
                       + plain.layers[1:], 0.0, plain.p2p, plain.allreduce)
    assert predict(net, strategy(1), more).seconds == predict(net, strategy(1), plain).seconds
    two = predict(net, strategy(2), more, record=True)
    added = [e for e in two.timeline.events if e.op.tag == "parallel"]
    assert sorted(e.rank for e in added) == [0, 1]
    assert all(e.end - e.start == pytest.approx(0.5 + 0.1 * 10) for e in added)
    assert two.seconds > predict(net, strategy(2), plain).seconds


def test_slowdown_interpolates_the_measured_rank_counts():
    lc = made_up().layers[0]
    assert lc.slowdown(8) == 1.0  # nothing measured
    lc = LayerCosts(**{**lc.__dict__, "concurrency": ((1, 1.0), (2, 1.2), (4, 1.6))})
    assert [lc.slowdown(k) for k in (1, 2, 4)] == [1.0, 1.2, 1.6]
    assert lc.slowdown(3) == pytest.approx(1.4)
    assert lc.slowdown(64) == 1.6  # beyond the measured: the largest count's


def test_concurrency_slows_the_calls_of_ranks_busy_at_once():
    """A gradient across P ranks: every step call takes the measured factor for P busy
    ranks (at most ``cores``), the work between calls does not; one rank: no factor."""
    net = NetSpec("dense", (4,), 8, 10)
    plain = made_up(step=1.0, solve=0.5)
    lc = plain.layers[0]
    slowed = Calibration((LayerCosts(**{**lc.__dict__,
                                        "concurrency": ((1, 1.0), (2, 1.5), (4, 2.0))}),)
                         + plain.layers[1:], 0.0, plain.p2p, plain.allreduce, solve_s=0.5)
    assert predict(net, strategy(1), slowed).seconds == predict(net, strategy(1), plain).seconds

    def durations(cal, P, **kw):
        events = predict(net, strategy(P), cal, record=True, **kw).timeline.events
        return ([e.end - e.start for e in events if e.op.kind == "step"],
                [e.end - e.start for e in events if e.op.kind == "work"])
    for P, factor, kw in ((2, 1.5, {}), (4, 2.0, {}), (4, 1.5, {"cores": 2})):
        steps, work = durations(slowed, P, **kw)
        base_steps, base_work = durations(plain, P, **kw)
        assert steps == pytest.approx([factor * t for t in base_steps])
        assert work == pytest.approx(base_work)
    assert any("x1.5 with 2 ranks busy" in note
               for note in predict(net, strategy(2), slowed).notes)


def test_data_groups_of_one_rank_take_no_slowdown():
    """The factors are measured where ranks wait for one another; data groups of a
    single rank (no layer or space partners) compute independently: their calls keep
    the one-rank cost, while a grid with layer or space ranks beside them takes it."""
    plain = made_up(step=1.0, solve=0.5)
    slowed = Calibration(tuple(LayerCosts(**{**lc.__dict__, "concurrency": (
        (1, 1.0), (2, 1.5), (4, 2.0))}) for lc in plain.layers), 0.0, plain.p2p,
        plain.allreduce, solve_s=0.5)
    dense, conv = NetSpec("dense", (4,), 8, 12), NetSpec("conv", (2, 8, 8), 8, 12)
    for net, s in ((dense, strategy(1, data=2)), (dense, strategy(1, data=4))):
        got = predict(net, s, slowed)
        assert got.seconds == predict(net, s, plain).seconds
        assert not any("ranks busy" in n for n in got.notes)
    for net, s in ((dense, strategy(2, data=2)), (conv, strategy(1, space=2))):
        assert predict(net, s, slowed).seconds > predict(net, s, plain).seconds


def test_the_gradient_call_takes_its_own_factor():
    """``sweep_grad`` multiplies the batched parameter-gradient call alone; without it
    that call takes ``sweep_batched`` as the relaxation's batched calls do."""
    net = NetSpec("dense", (4,), 8, 10)
    plain = made_up()
    lc = LayerCosts(**{**plain.layers[0].__dict__, "sweep_batched": 0.5})

    def durations(layer):
        cal = Calibration((layer,) + plain.layers[1:], 0.0, plain.p2p, plain.allreduce)
        events = predict(net, strategy(1, batched=True), cal, record=True).timeline.events
        return {(e.op.tag, e.op.batch): e.end - e.start for e in events
                if e.op.kind == "step"}
    before = durations(lc)
    after = durations(LayerCosts(**{**lc.__dict__, "sweep_grad": 1.5}))
    assert after[("grad", True)] == pytest.approx(3 * before[("grad", True)])
    assert {k: v for k, v in after.items() if k != ("grad", True)} == \
        {k: v for k, v in before.items() if k != ("grad", True)}
    assert ("fwd", True) in after  # relaxation's batched calls keep sweep_batched


def test_measured_stacking_replaces_the_gradient_calls_glue():
    """With ``stack`` measured, the batched gradient call is preceded by the stacking
    (2 states per layer, its own law) instead of glue: exactly its seconds more."""
    net = NetSpec("dense", (4,), 8, 10)
    plain = made_up(vec=0.25)
    lc = plain.layers[0]
    glued = LayerCosts(**{**lc.__dict__, "glue": CostFit(0.5, 0.0), "vec_factor": 2.0})
    stacked = LayerCosts(**{**glued.__dict__, "stack": CostFit(1.0, 0.25)})

    def cal(layer):
        return Calibration((layer,) + plain.layers[1:], 0.0, plain.p2p, plain.allreduce)
    before = predict(net, strategy(1, batched=True), cal(glued), record=True)
    after = predict(net, strategy(1, batched=True), cal(stacked), record=True)
    ops = [e.op for e in after.timeline.events]
    [k] = [i for i, op in enumerate(ops) if op.kind == "step" and op.tag == "grad"]
    assert ops[k - 1].tag == "stack" and ops[k - 1].rows == 2 * 8
    assert after.parts["stack"] == 1.0 + 0.25 * 16 * 10  # a + b * rows * samples
    # the glue of the call (0.5) and the glue-priced stacking (0.5) are gone
    assert after.seconds == pytest.approx(before.seconds - 1.0 + after.parts["stack"])


def test_braidpy_message_and_agreement_costs_enter_by_hand():
    """The measured software of a state message adds to every message as network time
    would; an agreement's to the objective and the 21 agreements of a gradient (ranks
    wait at each); one rank has neither."""
    import dataclasses

    from braidpy.perf.model import AGREEMENTS_PER_GRADIENT

    net = NetSpec("dense", (4,), 8, 10)
    base = made_up(alpha=0.25)
    soft = dataclasses.replace(base, message_software=Link(0.5, 0.0, "measured: test"),
                               agreement_s=2.0)
    slower_net = dataclasses.replace(base, p2p=Link(0.75, 0.0, "assumed: test"))
    no_agreements = dataclasses.replace(soft, agreement_s=0.0)
    two = strategy(2)
    assert predict(net, two, no_agreements).seconds == \
        pytest.approx(predict(net, two, slower_net).seconds)
    assert predict(net, two, soft).seconds == pytest.approx(
        predict(net, two, no_agreements).seconds + 2.0 * (AGREEMENTS_PER_GRADIENT + 1))
    assert predict(net, strategy(1), soft).seconds == predict(net, strategy(1), base).seconds


def test_python_level_collectives_stand_where_braidpy_makes_them():
    """Every rank waits at each of braidpy's Python-level collectives: the model places
    them at the end of each solve (the final value's agreement and broadcast), with the
    objective, after the parameter gradients, and the trainer's at the end."""
    import re

    from braidpy.perf.model import (AGREEMENTS_PER_GRADIENT, GRADIENT_COLLECTIVES,
                                    OBJECTIVE_COLLECTIVES, SOLVE_END_COLLECTIVES)

    def token(op):
        if op.kind == "step":
            return {"fwd": "F", "adj": "A", "grad": "G"}[op.tag]
        return {"agreement": "c", "objective": "o"}.get(op.tag, "s")  # s: the core's

    net = NetSpec("dense", (4,), 8, 10)
    events = predict(net, strategy(2), made_up(), record=True).timeline.events
    solve_end, objective = "c" * SOLVE_END_COLLECTIVES, "c" * OBJECTIVE_COLLECTIVES
    trainer = AGREEMENTS_PER_GRADIENT - 2 * SOLVE_END_COLLECTIVES - \
        OBJECTIVE_COLLECTIVES - GRADIENT_COLLECTIVES
    for rank in range(2):
        text = "".join(token(e.op) for e in events
                       if e.rank == rank and e.op.kind in ("step", "allreduce"))
        pattern = (f"^s[Fs]*Fs{solve_end}o{objective}s[As]*As{solve_end}G+"
                   f"{'c' * GRADIENT_COLLECTIVES}{'c' * trainer}$")
        assert re.match(pattern, text), (rank, text)


def test_two_ranks_by_hand():
    # Primal on 2 ranks (points 0..4, 5..8): 16 (test_perf_schedule), after rank 0's
    # opening (1) and the allreduce that holds rank 1 until then: 17; the classifier on
    # rank 1: 19. The adjoint runs on the mirrored layout, points 0..3 (rank 1) and
    # 4..8 (rank 0): FC sweeps 5 + 5 on the larger block, its 3 coarse steps (13), the
    # coarse relay from rank 1, ready at 8, 3 more steps (16), then the final sweep
    # waits for rank 1's early step and message (17) and takes 2 steps: 19 (38). Last,
    # rank 0's 4 gradient steps and the opening's gradient: 43; rank 1's end at 42, and
    # the Python-level agreements that close a gradient hold it until 43.
    net = NetSpec("dense", (4,), 8, 10)
    pred = predict(net, strategy(2), made_up())
    assert pred.seconds == 43
    assert pred.timeline.finish == [43, 43]


def test_network_costs_enter_per_message_and_allreduce():
    net = NetSpec("dense", (4,), 8, 10)
    fast = predict(net, strategy(2), made_up()).seconds
    slow = predict(net, strategy(2), made_up(alpha=0.5)).seconds
    # 5 messages on the critical path of each solve, allreduces: 3 per solve + objective
    # + the gradient's (each 0.5 per tree round; the ring is dearer for 2 ranks).
    assert slow > fast + 2 * 5 * 0.5
    assert allreduce_seconds(8e6, 1, Link(1, 1, "x"), Link(1, 1, "x")) == 0.0
    ring = allreduce_seconds(8e6, 8, Link(1e-6, 1e-9, "x"), Link(1e-6, 1e-9, "x"))
    assert ring == pytest.approx(2 * 7 * 1e-6 + 2 * 7 / 8 * 8e6 * 1e-9)


@pytest.mark.parametrize("space", [2, 4])
def test_a_space_split_adds_its_gradient_allreduce(space):
    """The bands' gradient parts are summed over the space group once per gradient: the
    total is the simulated makespan plus that allreduce (one layer rank, one data group:
    the other two allreduces are free), and the allreduce alone follows the parameter
    count, which nothing else in the time depends on."""
    alpha, beta = 1e-3, 1e-9
    cal = made_up(alpha=alpha, beta=beta)  # p2p and allreduce links alike
    rounds = {2: 1, 4: 2}[space]

    def by_hand(params):
        n = 8.0 * params
        tree = rounds * (alpha + beta * n)
        ring = 2 * (space - 1) * alpha + 2 * (space - 1) / space * n * beta
        return min(tree, ring)

    got = {}
    for params in (1000, 50000):
        net = NetSpec("conv", (2, 8, 8), 8, 64, params=params)
        one = predict(net, strategy(1), cal)
        assert one.seconds == one.timeline.makespan and "allreduce(space)" not in one.parts
        split = predict(net, strategy(1, space=space), cal)
        assert split.parts["allreduce(layers)"] == split.parts["allreduce(data)"] == 0.0
        assert split.parts["allreduce(space)"] == pytest.approx(by_hand(params), rel=1e-12)
        assert split.seconds - split.timeline.makespan == pytest.approx(by_hand(params),
                                                                        rel=1e-9)
        got[params] = split
    # Everything but the parameter count fixed: the totals differ by the allreduces'.
    assert got[50000].timeline.makespan == got[1000].timeline.makespan
    assert got[50000].seconds - got[1000].seconds == pytest.approx(
        by_hand(50000) - by_hand(1000), rel=1e-9)


def test_data_parallel_divides_the_samples():
    cal = made_up()
    net = NetSpec("conv", (2, 8, 8), 8, 64)
    one = predict(net, strategy(1), cal)
    four = predict(net, strategy(1, data=4), cal)
    assert four.parts["fwd"] == pytest.approx(one.parts["fwd"] / 4)
    two_space = predict(net, strategy(1, space=2), cal)
    # Each of 2 space ranks steps its 4 rows and a halo row either side, on the padded
    # grid: 8 of the image's 10 padded rows; the adjoint, with halos of 2 rows, all 10.
    assert two_space.parts["fwd"] == pytest.approx(one.parts["fwd"] * 0.8)
    assert two_space.parts["adj"] == pytest.approx(one.parts["adj"])
    tall = NetSpec("conv", (2, 64, 8), 8, 64)
    assert predict(tall, strategy(1, space=2), cal).parts["fwd"] == pytest.approx(
        predict(tall, strategy(1), cal).parts["fwd"] * (32 + 4) / 66)


def test_more_ranks_than_cores_scale_compute_as_a_lower_bound():
    """Ranks sharing cores: every computation takes ranks / cores times longer (with
    free messages, exactly that times the prediction with a core per rank), and the
    prediction says it is a lower bound; with a core per rank ``cores`` changes
    nothing."""
    net = NetSpec("dense", (4,), 8, 10)
    cal = made_up(step=1.0, vec=0.1, solve=0.5)
    alone = predict(net, strategy(4), cal)
    for cores in (4, 8):
        same = predict(net, strategy(4), cal, cores=cores)
        assert same.seconds == alone.seconds and same.notes == alone.notes
    for cores, factor in ((2, 2.0), (1, 4.0)):
        shared = predict(net, strategy(4), cal, cores=cores)
        assert shared.seconds == pytest.approx(factor * alone.seconds)
        assert set(shared.parts) == set(alone.parts)
        assert f"4 ranks on {cores} cores: compute x{factor:.2g}; more ranks than cores: " \
            f"a lower bound, not validated" in shared.notes


def test_memory_grows_with_the_samples_and_shrinks_with_ranks():
    net = NetSpec("dense", (8,), 64, 1000)
    m1 = memory_per_rank(net, strategy(1))
    assert memory_per_rank(NetSpec("dense", (8,), 64, 2000), strategy(1)) > m1
    assert memory_per_rank(net, Strategy(1, 1, 4, Cycle(ntime=64), (1, 1))) < m1


def test_infeasible_strategies_say_why():
    net = NetSpec("dense", (4,), 8, 10)
    with pytest.raises(ValueError, match="spatial parallelism needs conv layers"):
        predict(net, strategy(1, space=2), made_up())
    with pytest.raises(ValueError, match="20 data groups for 10 samples"):
        predict(net, strategy(1, data=20), made_up())
    # Space splits as training allows them: bands no thinner than the kernel radius.
    conv = NetSpec("conv", (2, 8, 8), 8, 16, kernel=5)
    predict(conv, strategy(1, space=4), made_up())  # bands of 2 rows, radius 2
    with pytest.raises(ValueError, match="8 row bands of a 8-row image are thinner than "
                                         "the kernel radius 2"):
        predict(conv, strategy(1, space=8), made_up())


def test_serial_propagation_with_a_sweep_fit_is_priced_by_it():
    """Where the calibration measured the serial sweeps (``serial``), serial propagation
    costs N of them plus the opening and the classifier, whatever the calls cost; MGRIT
    keeps the calls' prices."""
    net = NetSpec("dense", (4,), 64, 100)
    base = made_up(step=1e-3, alpha=1e-6, beta=1e-9)
    swept = dataclasses.replace(base, layers=(dataclasses.replace(
        base.layers[0], serial=CostFit(2e-6, 1e-8)),) + base.layers[1:])
    serial = Strategy(4, 1, 1, Cycle(ntime=64, max_levels=1))
    got = predict(net, serial, swept)
    per_layer = 2e-6 + 1e-8 * 25  # 100 samples over 4 data groups
    heads = 2 * 1e-3 + 2 * 1e-3  # opening forward and gradient, loss and its gradient
    want = 64 * per_layer + heads + allreduce_seconds(8.0 * net.nparams, 4, base.p2p,
                                                      base.allreduce)
    assert got.seconds == pytest.approx(want, rel=1e-12)
    assert got.parts["serial"] == pytest.approx(64 * per_layer, rel=1e-12)
    assert predict(net, serial, base).seconds > 40 * got.seconds  # the calls' price
    mgrit = Strategy(1, 1, 4, Cycle(ntime=64, max_levels=2, cfactor=4, batched=True))
    assert predict(net, mgrit, swept).seconds == predict(net, mgrit, base).seconds
    # plan's reference (serial on one process) takes it too
    assert plan(net, 4, swept).serial == pytest.approx(predict(
        net, Strategy(1, 1, 1, Cycle(ntime=64, max_levels=1)), swept).seconds)


def test_serial_trials_sweep_forward_and_the_gradient_after_one_backward_only():
    """A serial trial is the opening, the forward part of the sweeps (in the proportion
    of the calls' costs: a third with equal fwd, adj and grad) and the loss; the
    gradient at the point of a trial reuses its forward sweep and the opening."""
    net = NetSpec("dense", (4,), 64, 100)
    base = made_up(step=1e-3, alpha=1e-6, beta=1e-9)
    swept = dataclasses.replace(base, layers=(dataclasses.replace(
        base.layers[0], serial=CostFit(2e-6, 1e-8)),) + base.layers[1:])
    serial = Strategy(4, 1, 1, Cycle(ntime=64, max_levels=1))
    sweeps = 64 * (2e-6 + 1e-8 * 25)
    loss_allreduce = allreduce_seconds(8.0, 4, base.p2p, base.allreduce)
    one = predict(net, serial, swept, trials=1)
    assert one.trial_seconds == pytest.approx(1e-3 + sweeps / 3 + 1e-3 + loss_allreduce,
                                              rel=1e-12)
    assert one.reused_seconds == pytest.approx(sweeps / 3 + 1e-3, rel=1e-12)
    assert one.step_seconds == pytest.approx(one.seconds + 1e-3 + loss_allreduce, rel=1e-12)
    # Fewer than one trial a step on average: no gradient is sure to follow one.
    half = predict(net, serial, swept, trials=0.5)
    assert half.reused_seconds == 0
    assert half.step_seconds == pytest.approx(half.seconds + 0.5 * one.trial_seconds,
                                              rel=1e-12)


def test_plan_with_trials_ranks_by_the_step():
    net = NetSpec("dense", (4,), 64, 100)
    cal = made_up(step=1e-3, alpha=1e-6, beta=1e-9)
    got = plan(net, 4, cal, levels=(2,), cfactors=(4,), iterations=(2, 1), trials=1)
    steps = [p.step_seconds for p in got.ranked]
    assert steps == sorted(steps) and got.trials == 1
    assert all(p.trial_seconds > 0 for p in got.ranked)
    assert got.serial_step == pytest.approx(predict(
        net, Strategy(1, 1, 1, Cycle(ntime=64, max_levels=1, batched=True)), cal,
        trials=1).step_seconds)
    assert got.serial_step > got.serial  # no sweep fit: the trial's calls, none reused
    assert plan(net, 4, cal, levels=(2,), cfactors=(4,)).serial_step == got.serial


def test_calibrate_serial_measures_dense_sweeps_only():
    from braidpy.perf.calibrate import calibrate_serial

    fit = calibrate_serial("dense", (4,), samples=[8, 64], repeats=1, min_time=1e-3,
                           layers=(2, 10))
    assert fit is not None and [p[1] for p in fit.points] == [8, 64]
    assert all(p[2] > 0 for p in fit.points)
    assert calibrate_serial("conv", (2, 6, 6), samples=[4], repeats=1, min_time=1e-3,
                            layers=(2, 4)) is None


# ------------------------------------------------------------ the plan
def test_factorizations():
    assert factorizations(1) == [(1, 1, 1)]
    assert len(factorizations(12)) == 18
    with pytest.raises(ValueError, match="P must be an int >= 1, got 0"):
        factorizations(0)


def test_plan_ranks_fastest_first_and_rejects_what_does_not_fit():
    net = NetSpec("dense", (4,), 64, 16)
    result = plan(net, 4, made_up(step=1e-3, alpha=1e-6))
    times = [p.seconds for p in result.ranked]
    assert times == sorted(times)
    assert any("spatial" in why for _, why in result.rejected)
    assert result.ranked[0].seconds < result.ranked[-1].seconds
    assert {p.strategy.data for p in result.ranked} == {1, 2, 4}
    roomy = max(p.memory for p in result.ranked)
    tight = min(p.memory for p in result.ranked)
    limited = plan(net, 4, made_up(step=1e-3), memory=(roomy + tight) / 2)
    assert len(limited.ranked) < len(result.ranked)
    with pytest.raises(ValueError, match=r"no strategy for P=4 fits in .* GiB per rank"):
        plan(net, 4, made_up(), memory=tight / 2)


def test_named_networks_and_specs():
    assert network_spec("peaks").nlayers == 32
    assert network_spec("conv:8x28x28:4096", samples=100).samples == 100
    with pytest.raises(ValueError, match="network 'resnet50'"):
        network_spec("resnet50")
    with pytest.raises(ValueError, match="network 'dense:x:4'"):
        network_spec("dense:x:4")
    assert set(CLUSTERS) == {"ethernet-25g", "infiniband-100g"}


def test_the_skip_saves_the_first_down_sweep():
    warm = solve_program(Cycle(ntime=64, skip=True), 1, 1, cold=False)
    cold = solve_program(Cycle(ntime=64, skip=True), 1, 1, cold=True)
    assert program_counts(cold[0])["step"] < program_counts(warm[0])["step"]


# ---------------------------------------------------------- command line
def cli(*args):
    return subprocess.run([sys.executable, "-m", "braidpy", *map(str, args)],
                          capture_output=True, text=True, env=ENV, timeout=120)


def test_plan_prints_the_best(tmp_path, capsys):
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-4, alpha=1e-6, beta=1e-9), str(path))
    status, out, err = in_process(capsys, "plan", "--calibration", path, "--network",
                                  "dense:4:32", "--batch", "64", "-P", "4", "--top", "3")
    assert status == 0, err
    assert "1x1x4" in out and "speedup" in out
    assert "network costs assumed" in out
    status, out, err = in_process(capsys, "plan", "--calibration", path, "--network",
                                  "dense:4:32", "-P", "2", "--json", "--interconnect",
                                  "infiniband-100g")
    assert status == 0, err
    assert json.loads(out)["ranked"][0]["seconds"] > 0
    proc = cli("plan", "--calibration", path, "--network", "dense:4:32", "-P", "2")
    assert proc.returncode == 0, proc.stderr  # and as a command
    # With line-search trials: the seconds per step too, ranked and compared by them.
    status, out, err = in_process(capsys, "plan", "--calibration", path, "--network",
                                  "dense:4:32", "--batch", "64", "-P", "4", "--json",
                                  "--trials", "1", "--top", "50")
    assert status == 0, err
    got = json.loads(out)
    assert got["trials"] == 1 and got["serial_step_s"] > 0
    mgrit = [p for p in got["ranked"] if p["max_levels"] > 1]
    assert mgrit and all(p["step_seconds"] == pytest.approx(
        p["seconds"] + p["trial_seconds"]) for p in mgrit)
    steps = [p["step_seconds"] for p in got["ranked"]]
    assert steps == sorted(steps)
    status, out, err = in_process(capsys, "plan", "--calibration", path, "--network",
                                  "dense:4:32", "--batch", "64", "-P", "4", "--trials", "1")
    assert status == 0, err
    assert "s/step" in out and "with 1 line-search trial(s) per step" in out


def test_plan_relax_option_plans_that_relaxation(tmp_path, capsys):
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-4, alpha=1e-6, beta=1e-9), str(path))
    common = ("plan", "--calibration", path, "--network", "dense:4:64", "--batch", "64",
              "-P", "4", "--levels", "2", "--cfactors", "4", "--json", "--top", "50")
    ranked = {}
    for relax in ("F", "FCF"):
        status, out, err = in_process(capsys, *common, "--relax", relax)
        assert status == 0, err
        ranked[relax] = {(p["data"], p["layers"]): p for p in json.loads(out)["ranked"]
                         if p["max_levels"] > 1}
        assert {p["relax"] for p in ranked[relax].values()} == {relax}
    # F-relaxation skips the C-relaxation's steps: every MGRIT split is predicted faster.
    assert ranked["F"].keys() == ranked["FCF"].keys() and ranked["F"]
    for split, p in ranked["F"].items():
        assert p["seconds"] < ranked["FCF"][split]["seconds"], split
    status, out, err = in_process(capsys, *common[:-3], "--relax", "F", "--top", "3")
    assert status == 0, err
    assert " L2 cf4 F m2/2 " in out  # the label names a relaxation other than FCF
    status, out, err = in_process(capsys, *common[:-3], "--top", "3")
    assert " L2 cf4 m2/2 " in out
    status, out, err = in_process(capsys, *common, "--relax", "C")
    assert status == 2 and "argument --relax: invalid choice: 'C'" in err


@pytest.mark.parametrize("args,status,message", [
    (["--calibration", "{missing}", "--network", "peaks", "-P", "2"], 1,
     "calibration file '{missing}' not found"),
    (["--calibration", "{bad}", "--network", "peaks", "-P", "2"], 1, "is not JSON"),
    (["--calibration", "{old}", "--network", "peaks", "-P", "2"], 1,
     "field calibration.version is 0"),
    (["--calibration", "{good}", "--network", "peaks", "-P", "0"], 2,
     "argument -P/--procs: expected an int >= 1, got '0'"),
    (["--calibration", "{good}", "--network", "peaks", "-P", "two"], 2,
     "expected an int >= 1, got 'two'"),
    (["--calibration", "{good}", "--network", "dense:8", "-P", "2"], 2,
     "network 'dense:8': expected a name"),
    (["--calibration", "{good}", "--network", "dense:4:2", "--batch", "1", "-P", "64"], 1,
     "no strategy for P=64 can run dense x 2 layers"),
    (["--calibration", "{good}", "--network", "peaks", "-P", "2", "--memory", "1e-9"], 1,
     "no strategy for P=2 fits in"),
    (["--calibration", "{dense}", "--network", "mnist", "-P", "2"], 1,
     "the calibration has no conv layers"),
    (["--calibration", "{good}", "--network", "peaks", "-P", "2", "--trials", "-1"], 2,
     "argument --trials: expected a number >= 0, got '-1'"),
])
def test_plan_bad_input_names_the_value(tmp_path, capsys, args, status, message):
    files = {"missing": str(tmp_path / "missing.json"), "bad": str(tmp_path / "bad.json"),
             "old": str(tmp_path / "old.json"), "good": str(tmp_path / "good.json"),
             "dense": str(tmp_path / "dense.json")}
    (tmp_path / "bad.json").write_text("[1, 2")
    old = made_up().to_json()
    old["version"] = 0
    (tmp_path / "old.json").write_text(json.dumps(old))
    save_calibration(made_up(), files["good"])
    cal = made_up()
    save_calibration(Calibration(cal.layers[:1], 0.0, cal.p2p, cal.allreduce), files["dense"])
    got, out, err = in_process(capsys, "plan", *[a.format(**files) for a in args])
    assert got == status, out + err
    assert message.format(**files) in err


def test_calibrate_bad_input_names_the_value(tmp_path):
    proc = cli("calibrate", "-o", tmp_path / "c.json", "--layer", "conv:8x28")
    assert proc.returncode == 2
    assert "layer 'conv:8x28'" in proc.stderr
    proc = cli("calibrate", "--layer", "dense:8")
    assert proc.returncode == 2 and "-o/--output" in proc.stderr
    proc = cli("calibrate", "-o", tmp_path / "no" / "dir" / "c.json", "--layer", "dense:2",
               "--samples", "1", "--rows", "1", "--repeats", "1")
    assert proc.returncode == 1 and "No such file or directory" in proc.stderr


def test_calibrate_under_mpi_measures_the_network(tmp_path):
    from test_mpi import MPIEXEC

    out = tmp_path / "c.json"
    proc = run_mpi([MPIEXEC, "-n", "2", sys.executable, "-m", "braidpy", "calibrate",
                           "-o", str(out), "--layer", "dense:2", "--samples", "2", "--rows",
                           "1", "2", "--repeats", "1", "-q"],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cal = load_calibration(str(out))
    assert cal.nranks == 2
    assert cal.p2p.source == "measured" and cal.allreduce.source.startswith("measured")
    # braidpy's own message path against the raw one, and an agreement's cost
    assert cal.message_software.source.startswith("measured: ping-pong through braidpy")
    assert cal.message_software.alpha >= 0 and cal.agreement_s > 0
    # and what a gradient across the ranks adds beyond the one-rank measurements
    lc = cal.layers[0]
    assert lc.fixed_parallel is not None and lc.fixed_parallel.seconds(1, 2) > 1e-6
    # and how much slower its calls ran with both ranks busy than on rank 0 alone
    assert [k for k, _ in lc.concurrency] == [1, 2] and lc.concurrency[0][1] == 1.0
    assert 0.2 < lc.concurrency[1][1] < 20


def test_calibrate_with_more_ranks_than_cores_measures_on_a_core_each(tmp_path):
    """``--cores 1`` under ``mpiexec -n 2``: one rank has the core, so the network is
    left assumed and nothing is measured across ranks; no gradient runs with the ranks
    sharing the core, no factor for it is written, and the output says so."""
    from test_mpi import MPIEXEC

    out = tmp_path / "c.json"
    proc = run_mpi([MPIEXEC, "-n", "2", sys.executable, "-m", "braidpy", "calibrate",
                    "-o", str(out), "--layer", "dense:2", "--samples", "2", "4",
                    "--rows", "1", "2", "--repeats", "1", "--cores", "1"],
                   capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 ranks, 1 cores: measuring across ranks on the first 1" in proc.stderr
    assert "ranks sharing cores are not measured" in proc.stderr
    cal = load_calibration(str(out))
    assert cal.nranks == 2 and cal.p2p.source.startswith("assumed")
    lc = cal.layers[0]
    assert lc.concurrency == ((1, 1.0),) and lc.fixed_parallel is None
    assert not set(json.loads(out.read_text())["layers"][0]) & set(_SHARING_FIELDS)


_QUIET = """
import sys, time
from mpi4py import MPI
from braidpy.perf.calibrate import quiet_barrier
comm = MPI.COMM_WORLD
if comm.Get_size() != 2:
    sys.exit(3)  # the ranks did not run together
comm.Barrier()
if comm.Get_rank() == 0:
    time.sleep(1.0)  # rank 0 measures alone
    quiet_barrier(comm)
else:
    cpu, wall = time.process_time(), time.perf_counter()
    quiet_barrier(comm)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"RESULT {cpu} {wall}")
"""


def test_ranks_waiting_for_rank_0_sleep():
    """While rank 0 measures alone, the others wait without spinning a core (MPI's
    blocking barrier polls: about as much CPU as wall time)."""
    from test_mpi import MPIEXEC

    proc = run_mpi([MPIEXEC, "-n", "2", sys.executable, "-c", _QUIET],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cpu, wall = map(float, proc.stdout.split("RESULT ")[1].split())
    assert wall > 0.9 and cpu < 0.3 * wall


_FOLLOWER_ALLOCATOR = """
import sys
from mpi4py import MPI
import braidpy.perf.calibrate as C
comm = MPI.COMM_WORLD
if comm.Get_size() != 2:
    sys.exit(3)  # the ranks did not run together
kept = []
real = C.keep_freed_memory
C.keep_freed_memory = lambda: kept.append(1) or real()
if comm.Get_rank() == 0:
    C.calibrate(["dense:2"], comm=comm, samples=[2], rows=[1, 2], repeats=1)
else:
    C.calibrate_follower(comm, ["dense:2"], repeats=1)
# one write per rank (a pipe keeps short writes whole; print's pieces interleave)
sys.stdout.write(f"RESULT {comm.Get_rank()} {len(kept) > 0}\\n")
"""


def test_every_rank_keeps_freed_memory_while_gradients_are_timed():
    """The gradients across ranks time every rank's calls: the others must run in the
    allocator regime rank 0 measured in (else their calls pay page faults: the
    slowdown beside busy ranks came out 1.3x too high)."""
    from test_mpi import MPIEXEC

    proc = run_mpi([MPIEXEC, "-n", "2", sys.executable, "-c", _FOLLOWER_ALLOCATOR],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for rank in (0, 1):
        assert f"RESULT {rank} True" in proc.stdout, proc.stdout


_FAILING_CALIBRATION = """
import sys
from mpi4py import MPI
import braidpy.perf.calibrate as C
if MPI.COMM_WORLD.Get_size() != 2:
    sys.exit(3)  # the ranks did not run together
if MPI.COMM_WORLD.Get_rank() == 0:
    def fails(*args, **kwargs):
        raise RuntimeError("planted failure on rank 0")
    C.{name} = fails
from braidpy.cli import main
sys.exit(main(["calibrate", "-o", sys.argv[1], "--layer", "dense:2", "--samples", "2",
               "--rows", "1", "2", "--repeats", "1", "-q"]))
"""


@pytest.mark.parametrize("name", ["calibrate_layer", "calibrate_in_solve"])
def test_calibrate_under_mpi_stops_every_rank_when_rank_0_fails(tmp_path, name):
    """Rank 0 measures alone between collectives: its failure there reaches the other
    ranks at an agreement, and both exit with status 1 instead of waiting forever."""
    from test_mpi import MPIEXEC

    script = tmp_path / "failing.py"
    script.write_text(_FAILING_CALIBRATION.format(name=name))
    proc = run_mpi([MPIEXEC, "-n", "2", sys.executable, str(script),
                           str(tmp_path / "c.json")],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("planted failure on rank 0") == 1
    assert not (tmp_path / "c.json").exists()


class _SlowFirstBatch:
    """A two-rank communicator (this is rank 0) whose first ``slow`` sends of every
    message size each take 5 ms: a partner descheduled by other jobs."""

    def __init__(self, slow):
        self.slow, self.sends, self.size = slow, 0, None

    def Get_size(self):
        return 2

    def Get_rank(self):
        return 0

    def Barrier(self):
        pass

    def Send(self, buf, dest, tag):
        if buf.size != self.size:
            self.size, self.sends = buf.size, 0
        self.sends += 1
        if self.sends <= self.slow:
            import time
            time.sleep(5e-3)

    def Recv(self, buf, source, tag):
        pass

    def Allreduce(self, send, recv, op=None):
        recv[...] = send

    def Bcast(self, buf, root=0):
        pass


def test_network_calibration_keeps_the_fastest_batch():
    pytest.importorskip("mpi4py")
    from braidpy.perf.calibrate import calibrate_network

    # 4 batches of 10 round trips per size; the first batch's sends take 5 ms each:
    # 2.5 ms per message in it, about 0 in the three others. The fastest batch is kept,
    # so alpha is far below 2.5 ms (a mean over all batches would give 0.625 ms).
    p2p, _ = calibrate_network(_SlowFirstBatch(slow=10), sizes=(8, 1024, 65536),
                               repeats=10, batches=4)
    assert p2p.source == "measured" and p2p.alpha < 1e-4


def test_calibrate_writes_a_file_plan_reads(tmp_path):
    out = tmp_path / "c.json"
    proc = cli("calibrate", "-o", out, "--layer", "dense:2", "--samples", "2", "--rows", "1",
               "2", "--repeats", "1", "-q")
    assert proc.returncode == 0, proc.stderr
    cal = load_calibration(str(out))
    assert cal.layers[0].name == "dense-w2" and cal.nranks == 1
    assert cal.p2p.source.startswith("assumed")  # one rank: no network measured
    assert all(math.isfinite(f.a) for f in cal.layers[0].costs.values())
    # braidpy's message software is measured on one rank too, by messages to itself
    assert cal.message_software.source.startswith("measured: messages to itself")
    assert cal.message_software.seconds(8) > 0 and cal.agreement_s == 0.0
    # on the host, what calls inside a solve add is measured call by call
    lc = cal.layers[0]
    assert lc.glue is not None and lc.glue.a >= 0 and lc.glue.b >= 0
    assert lc.glue.seconds(1, 2) > 0  # the core does copy between calls
    assert lc.glue.points  # the measured medians, which the model interpolates
    assert lc.stack is not None and lc.stack.seconds(2, 2) > 0
    assert 0.25 <= lc.sweep <= 8 and 0.25 <= lc.sweep_batched <= 8
    assert lc.sweep_grad is not None and 0.25 <= lc.sweep_grad <= 8
    assert 0.25 <= lc.vec_scale <= 8 and lc.fixed.a >= 0 and lc.fixed.b >= 0
    # dense layers sweep in one call: their serial gradients are measured too
    assert lc.serial is not None and lc.serial.seconds(1, 2) > 0


def test_calibrate_measures_inside_a_solve_at_the_smallest_middle_and_largest(tmp_path):
    """Glue and fixed costs are measured at three sample counts, the largest included:
    fitted to the smallest and the middle, they had been extrapolated 20-fold."""
    out = tmp_path / "c.json"
    proc = cli("calibrate", "-o", out, "--layer", "dense:2", "--samples", "2", "3", "4",
               "6", "--rows", "1", "2", "--repeats", "1", "-q")
    assert proc.returncode == 0, proc.stderr
    lc = load_calibration(str(out)).layers[0]
    assert sorted({n for _, n, _ in lc.glue.points}) == [2, 4, 6]


def test_calibrate_on_a_device_keeps_the_numbers_there(tmp_path):
    """calibrate(device=...) on array-api-strict's device1, whose arrays refuse any
    conversion to NumPy: a hidden host copy in the layer, vector or sweep timing would
    raise. The file names the device; every fit is finite and the factors in range."""
    xp = pytest.importorskip("array_api_strict")
    from braidpy._device import placement
    from braidpy.perf import save_calibration
    from braidpy.perf.calibrate import calibrate

    where = placement(xp.Device("device1"), xp)
    cal = calibrate(["dense:3", "conv:2x5x5:3"], samples=(2, 4), rows=(1, 2), repeats=1,
                    min_time=1e-4, device=where)
    assert cal.device == where.name and "device1" in cal.device
    assert cal.host["gpu"].startswith(f"layer costs measured on {where.name}")
    for lc in cal.layers:
        assert all(math.isfinite(f.a) and math.isfinite(f.b) for f in lc.costs.values())
        assert 0.25 <= lc.sweep <= 8.0 and 0.25 <= lc.sweep_batched <= 8.0
    save_calibration(cal, str(tmp_path / "dev.json"))
    assert load_calibration(str(tmp_path / "dev.json")).device == where.name


def test_device_messages_are_copied_through_the_host():
    """With a device, each ping-pong message leaves the device and comes back to it."""
    pytest.importorskip("mpi4py")
    from braidpy._device import HOST
    from braidpy.perf.calibrate import calibrate_network

    class Counting(type(HOST)):
        def __init__(self):
            super().__init__(np, "fake", "fake:0")
            self.to, self.back = 0, 0

        @property
        def is_host(self):
            return False

        def to_host(self, a):
            self.to += 1
            return np.array(a, copy=True)

        def from_host(self, a, dtype="float64"):
            self.back += 1
            return np.array(a, copy=True)

    where = Counting()
    calibrate_network(_SlowFirstBatch(slow=0), sizes=(8, 1024), repeats=3, batches=2,
                      where=where)
    # rank 0 sends and receives once per round trip: 2 sizes x 2 batches x 3 round trips
    assert where.to == 12 and where.back == 12 + 2  # + each size's first upload


def test_predictions_beyond_the_calibrated_calls_say_so():
    """A prediction whose calls are larger than any calibrated one (more states per
    batched call, more samples) notes that they were extrapolated, and how to
    calibrate them; within the calibrated range it says nothing."""
    pts = tuple((r, n, 1e-6 * r * n) for r in (1, 4) for n in (10, 100))
    fit = CostFit(0.0, 1e-6, pts)
    layer = LayerCosts("dense-w4", "dense", (4,), 1,
                       {"fwd": fit, "adj": fit, "grad": fit, "vec": CostFit(0.0, 0.0)})
    link = Link(0.0, 0.0, "measured")
    cal = Calibration((layer,), 0.0, link, link, solve_s=0.0)
    def batched(ntime):
        return Strategy(1, 1, 1, Cycle(ntime=ntime, max_levels=2, cfactor=2, batched=True),
                        (1, 1))

    small = predict(NetSpec("dense", (4,), 4, 100), batched(4), cal)
    assert not any("extrapolated" in n for n in small.notes)
    big = predict(NetSpec("dense", (4,), 64, 1000), batched(64), cal)
    assert "calls of up to 64 states extrapolated from the calibrated 4 (braidpy calibrate " \
           "--rows ... 64)" in big.notes
    assert "1000 samples per call extrapolated from the calibrated 100 (braidpy calibrate " \
           "--samples ... 1000)" in big.notes


def test_a_trial_across_data_groups_adds_the_loss_allreduce_by_hand():
    # Two data groups of 32 samples each run the trial of one group of 32 (the layer
    # ranks' programs are the same), then average the loss over the groups: one
    # allreduce of 8 bytes over 2 processes, on the calibration's links.
    cal = made_up(alpha=0.25, beta=1e-3)
    half, whole = NetSpec("dense", (4,), 8, 32), NetSpec("dense", (4,), 8, 64)
    for P in (1, 2):
        group = predict(half, strategy(P), cal, trials=1)
        two = predict(whole, strategy(P, data=2), cal, trials=1)
        loss_allreduce = allreduce_seconds(8.0, 2, cal.p2p, cal.allreduce)
        assert loss_allreduce == pytest.approx(0.25 + 8e-3)  # one tree round
        assert two.trial_seconds == pytest.approx(group.trial_seconds + loss_allreduce,
                                                  rel=1e-12), P
        assert two.step_seconds == pytest.approx(two.seconds + two.trial_seconds)


def test_the_plan_table_prints_the_speedup_per_step_by_hand():
    from braidpy.perf.plan import format_plan

    net = NetSpec("dense", (4,), 64, 100)
    cal = made_up(step=1e-3, alpha=1e-6, beta=1e-9)
    for trials in (0, 1):
        got = plan(net, 4, cal, levels=(2,), cfactors=(4,), iterations=(2, 1), trials=trials)
        rows = format_plan(got, top=3).splitlines()[1:4]
        for pred, row in zip(got.ranked, rows):
            printed = float(next(w for w in row.split() if w.endswith("x") and w[:-1]
                                 .replace(".", "", 1).isdigit())[:-1])
            # with trials, the serial step over the strategy's step (both with trials)
            want = got.serial_step / pred.step_seconds if trials else \
                got.serial / pred.seconds
            assert printed == pytest.approx(want, abs=0.005), (trials, row)
        if trials:  # a trial costs more than nothing: the two ratios differ here
            assert got.serial_step / got.ranked[0].step_seconds != pytest.approx(
                got.serial / got.ranked[0].seconds, abs=0.01)
