"""benchmarks/scaling.py: the time-to-loss logic on synthetic logs, and its --small run
(every cell a number or an explicit reason, the host described)."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from braidpy.perf.auto import Setting, qualified

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "scaling.py"


@pytest.fixture(scope="module")
def scaling():
    spec = importlib.util.spec_from_file_location("scaling_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ time to a loss


def test_first_reaching_is_the_first_step_at_or_below_the_target(scaling):
    losses = [2.0, 1.5, 1.2, 1.0, 0.9, 1.1]
    seconds = [0.5, 0.1, 0.2, 0.3, 0.4, 0.5]
    # Step 4 is the first <= 1.0 (equality counts); its time is the sum through it.
    assert scaling.first_reaching(losses, seconds, 1.0) == (4, pytest.approx(1.1))
    assert scaling.first_reaching(losses, seconds, 2.0) == (1, pytest.approx(0.5))
    assert scaling.first_reaching(losses, seconds, 0.9) == (5, pytest.approx(1.5))


def test_first_reaching_not_reached(scaling):
    assert scaling.first_reaching([2.0, 1.5, 1.2], [1.0, 1.0, 1.0], 1.0) is None
    assert scaling.first_reaching([], [], 1.0) is None
    # Diverged steps (logged as "nan"/"inf", read as +inf) never reach a target.
    assert scaling.first_reaching([math.inf, math.inf], [1.0, 1.0], 1.0) is None


def test_first_reaching_round_off_slack(scaling):
    """A run equal to the serial one up to round-off reaches its target; a real
    difference does not."""
    target = 0.123456789
    assert scaling.first_reaching([1.0, target * (1 + 1e-13)], [1.0, 1.0], target) == (2, 2.0)
    assert scaling.first_reaching([1.0, target * (1 + 1e-6)], [1.0, 1.0], target) is None


def test_first_reaching_with_a_window_averages_noisy_losses(scaling):
    losses = [3.0, 0.5, 3.0, 1.0, 1.0, 0.8]
    seconds = [1.0] * 6
    # Without a window the lucky 0.5 at step 2 would count.
    assert scaling.first_reaching(losses, seconds, 1.0) == (2, 2.0)
    # Trailing means of 3: -, -, 2.17, 1.5, 1.67, 0.93 -> step 6.
    assert scaling.first_reaching(losses, seconds, 1.0, window=3) == (6, 6.0)
    assert scaling.trailing_means([1.0, 2.0, 3.0], 2) == [None, 1.5, 2.5]
    # The target of an averaged row: the mean of the serial run's last `window` losses.
    assert scaling.target_loss([4.0, 2.0, 1.0, 0.0], 2) == 0.5
    assert scaling.target_loss([4.0, 2.0, 1.0, 0.0]) == 0.0


def _write_log(path, losses, seconds, cut_last=False, end=True):
    lines = [json.dumps({"event": "header", "grid": [2, 1, 1]})]
    for i, (loss, sec) in enumerate(zip(losses, seconds), start=1):
        lines.append(json.dumps({"event": "step", "iteration": i, "loss": loss,
                                 "seconds": sec}))
    if end:
        lines.append(json.dumps({"event": "end", "stop_reason": "iterations"}))
    text = "\n".join(lines) + "\n"
    if cut_last:  # a run killed while writing its last record
        text = text[:-20]
    path.write_text(text)


def _run(scaling, path, status="exited", reason=None, limit=None):
    header, steps, end = scaling.read_log(str(path))
    return {"status": status, "reason": reason, "rc": 0 if status == "exited" else -15,
            "output_tail": "", "steps_logged": len(steps),
            "losses": scaling.losses_of(steps), "step_seconds": scaling.seconds_of(steps),
            "limit_seconds": limit, "projected_seconds": None,
            "stop_reason": end.get("stop_reason") if end else None}


def test_the_checks_share_of_the_time_to_the_loss(scaling):
    run = {"status": "exited", "reason": None, "rc": 0,
           "losses": [2.0, 1.0, 0.6, 0.4, 0.3, 0.2],
           "step_seconds": [0.9, 0.5, 0.2, 0.5, 0.2, 0.5],
           "check_seconds": [0, 0.3, 0, 0.3, 0, 0.3],
           "ran": {"quality_check_every": 2}, "stop_reason": "iterations"}
    m = scaling.training_metrics(run, {"loss": 0.5, "step": 3, "seconds": 1.0}, 1, 10)
    # reached at step 4 in 2.1 s, of which the checks of steps 2 and 4 took 0.6 s
    assert m["to_target"]["seconds"] == pytest.approx(2.1)
    assert m["to_target"]["check_seconds"] == pytest.approx(0.6)
    run["ran"] = {"quality_check_every": 0}  # a run without checks says nothing of them
    assert "check_seconds" not in scaling.training_metrics(
        run, {"loss": 0.5, "step": 3, "seconds": 1.0}, 1, 10)["to_target"]


def test_synthetic_log_reached_and_not_reached(scaling, tmp_path):
    log = tmp_path / "run.jsonl"
    _write_log(log, [2.0, 1.0, "nan", 0.4, 0.3], [0.9, 0.2, 0.2, 0.2, 0.2], cut_last=True,
               end=False)
    header, steps, end = scaling.read_log(str(log))
    assert header["grid"] == [2, 1, 1] and end is None
    assert len(steps) == 4  # the cut-off last record is ignored
    losses = scaling.losses_of(steps)
    assert losses[2] == math.inf  # "nan" from a diverged step

    target = {"loss": 0.5, "step": 3, "seconds": 1.0}
    m = scaling.training_metrics(_run(scaling, log), target, 1, 10)
    assert m["to_target"] == {"seconds": pytest.approx(1.5), "step": 4}
    # per step: the median without the first (setup) step
    assert m["per_step"]["seconds"] == pytest.approx(0.2)
    scaling.with_speedup(m["to_target"], 3.0)
    assert m["to_target"]["speedup"] == pytest.approx(2.0)

    # Ran all M steps without reaching a lower target: a reason naming M, no number.
    _write_log(log, [2.0, 1.0, 0.8], [0.5, 0.5, 0.5])
    m = scaling.training_metrics(_run(scaling, log), {"loss": 0.5, "step": 3}, 1, 3)
    assert "seconds" not in m["to_target"]
    assert m["to_target"]["kind"] == "steps"
    assert m["to_target"]["reason"].startswith("not reached within 3 steps")
    assert scaling.short(m["to_target"]) == "not in 3 steps"

    # Stopped at its time limit: a lower bound, and the speedup bound it gives.
    m = scaling.training_metrics(
        _run(scaling, log, status="stopped", reason="limit: ...", limit=1.5),
        {"loss": 0.5, "step": 3}, 1, 10)
    assert m["to_target"]["kind"] == "limit" and m["to_target"]["at_least"] == 1.5
    scaling.with_speedup(m["to_target"], 1.2)
    assert m["to_target"]["speedup_below"] == pytest.approx(0.8)
    assert scaling.short(m["to_target"]) == ">1.5 (<0.80x)"

    # Killed before any step: both metrics are reasons.
    _write_log(log, [], [], end=False)
    m = scaling.training_metrics(_run(scaling, log, status="timeout",
                                      reason="timeout: killed after 9 s"),
                                 {"loss": 0.5, "step": 3}, 1, 10)
    assert m["per_step"]["reason"] == "timeout: killed after 9 s"
    assert m["to_target"]["kind"] == "timeout"


# ------------------------------------------------------------------ the --small run


def _check_metric(where, m):
    assert isinstance(m, dict), where
    if "seconds" in m:
        assert isinstance(m["seconds"], (int, float)) and math.isfinite(m["seconds"]), where
        assert m["seconds"] >= 0, where
    else:
        assert isinstance(m.get("reason"), str) and m["reason"].strip(), where


def test_small_run_json(tmp_path):
    out = tmp_path / "scaling.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--small", "--json", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())

    host = report["host"]
    for key in ("date", "python", "numpy", "cpu", "mpi", "blas", "git"):
        assert key in host, key
    assert host["cpu"]["logical"] >= 1 and host["cpu"]["physical"] >= 1
    assert "library" in host["mpi"] or "error" in host["mpi"]
    assert report["child_env"]["OMP_NUM_THREADS"] == "1"
    assert report["ranks"] == [1, 2]
    # serial runs, then at P = 1 and 2 the time rows' launch and each row's grids and auto
    assert report["plan"]["launches"] == 2 + 1 + (1 + 2 * 1) + (1 + 2 * 3)
    assert "host " in proc.stdout and "plan:" in proc.stdout  # printed before measuring
    assert proc.stdout.index("host ") < proc.stdout.index("plan:") < \
        proc.stdout.index("seconds per step")

    rows = {r["name"]: r for r in report["rows"]}
    assert set(rows) == {"peaks16", "batch8", "heat", "ode"}
    for row in rows.values():
        names = ("per_step", "to_target") if row["kind"] == "training" else ("solve",)
        serial = row["serial"]
        for name in names:
            _check_metric((row["name"], "serial", name), serial["metrics"][name])
        for P in report["ranks"]:
            columns = {c["column"]: c for c in row["cells"] if c["P"] == P}
            assert {"layer", "data", "best", "auto"} <= set(columns), (row["name"], P)
            for column, cell in columns.items():
                for name in names:
                    _check_metric((row["name"], P, column, name), cell["metrics"][name])
            for name in names:  # best: the least number of every other column at P
                numbers = [c["metrics"][name]["seconds"] for c in columns.values()
                           if c["column"] != "best" and "seconds" in c["metrics"][name]]
                best = columns["best"]["metrics"][name]
                assert best.get("seconds") == (min(numbers) if numbers else None), (
                    row["name"], P, name, best, numbers)
            if row["kind"] == "time":
                assert columns["data"]["metrics"]["solve"]["reason"].startswith("n/a")
                assert columns["auto"]["metrics"]["solve"]["reason"].startswith("n/a")
        if row["kind"] == "training":
            # The serial run measured: its target and both numbers.
            assert row["target"]["loss"] > 0 and 1 <= row["target"]["step"] <= row["steps"]
            assert "seconds" in serial["metrics"]["per_step"]
            assert "seconds" in serial["metrics"]["to_target"]
            P1 = {c["column"]: c for c in row["cells"] if c["P"] == 1}
            assert P1["data"]["metrics"]["per_step"]["same_as"] == "serial"
            assert P1["auto"]["grid"] == "1,1,1"
            # The layer grid ran the setting --grid auto chooses for it, with the checks
            # (the calibration made at the start), as its log reports.
            P2 = {c["column"]: c for c in row["cells"] if c["P"] == 2}
            layer = P2["layer"]
            assert report["calibration"].get("path"), report["calibration"]
            assert layer["checks"] == 10
            s = layer["setting"]
            assert Setting(**s) in qualified(16)
            assert layer["run"]["ran"] == {**s, "quality_check_every": 10}
            # what the checks took, step by step and up to the loss (none before step 10)
            checks = layer["run"]["check_seconds"]
            assert len(checks) == layer["run"]["steps_logged"] and all(c >= 0 for c in checks)
            assert not any(checks[:9]) and (len(checks) < 10 or checks[9] > 0)
            reach = layer["metrics"]["to_target"]
            if "seconds" in reach:
                assert reach["check_seconds"] == pytest.approx(sum(checks[:reach["step"]]))
            assert layer["run"]["grid"] == [1, 1, 2]
            auto = P2["auto"]
            if "run" in auto:  # a launch of its own: with the checks, auto's grid
                assert auto["run"]["ran"]["quality_check_every"] == 10
                assert auto["run"]["grid"] == auto["choice"]["shape"]
            # Speedups wherever a parallel cell has a number.
            for c in row["cells"]:
                for name in names:
                    m = c["metrics"][name]
                    if "seconds" in m:
                        assert m["speedup"] > 0, (row["name"], c["P"], c["column"])
        else:
            assert "seconds" in serial["metrics"]["solve"]
