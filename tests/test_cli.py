"""The command line (braidpy.cli, python -m braidpy): options, logs, plots, resume, MPI."""

import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from test_mpi import MPIEXEC

from braidpy.cli import build_parser, make_config, make_network, resolve
from braidpy.nn import ResNet
from braidpy.train import TrainConfig, load_checkpoint
from braidpy.train.presets import library_defaults, preset
from braidpy.train.progress import Progress, format_step
from cli_runner import in_process
from mpi_process import run_mpi

# Tiny runs: 100 peaks points, 8 layers (two MGRIT levels with cf 4), 3 steps.
# MGRIT on one rank too (the default mode 'auto' runs serial backprop there); the
# iteration count last (tests replace it).
TINY = ["--mode", "oneshot", "--samples", "100", "--validation-samples", "50", "--layers", "8",
        "--iterations", "3"]
ENV = dict(os.environ, PYTHONWARNINGS="error", OMP_NUM_THREADS="1")


def cli(*args, nranks=1, cwd=None, timeout=120):
    cmd = [sys.executable, "-m", "braidpy", *map(str, args)]
    if nranks > 1:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    return run_mpi(cmd, capture_output=True, text=True, timeout=timeout, env=ENV,
                          cwd=cwd)


def ok(*args, **kwargs):
    proc = cli(*args, **kwargs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def read_log(path):
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # strict JSON: no NaN literals
    assert [r["event"] for r in records] == ["header"] + ["step"] * (len(records) - 2) + ["end"]
    return records[0], records[1:-1], records[-1]


def progress_lines(proc):
    return re.findall(r"^step \d+/\d+", proc.stderr, flags=re.MULTILINE)


def steps_without_time(records):
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in records]


# ------------------------------------------------------------------ parsing and errors


def test_help_lists_the_options():
    proc = ok("train", "--help-all")
    for option in ("--width", "--layers", "--mode", "--m1", "--levels", "--cf", "--abs-tol",
                   "--optimizer", "--tikhonov", "--ddt", "--classifier-reg", "--patience",
                   "--target-accuracy", "--checkpoint", "--resume", "--log", "--plot",
                   "--quiet", "peaks|digits|digits28|mnist|FILE"):
        assert option in proc.stdout, option
    top = ok("--help").stdout
    assert "train" in top and "evaluate" in top and "predict" in top


def parse(*argv):
    return resolve(build_parser().parse_args(["train", *argv]))


def test_defaults_are_the_papers_peaks_setup():
    args = parse("peaks")
    assert (args.width, args.tstop, args.activation, args.optimizer) == (8, 5.0, "smooth_relu",
                                                                          "lbfgs")
    assert (args.mode, args.m1, args.m2, args.levels, args.cf) == ("auto", 2, 2, 2, 4)
    assert (args.layers, args.seed, args.iterations, args.batch) == (32, 1, 100, None)


def test_defaults_come_from_the_library():
    # One source: the command line's values are TrainConfig's and ResNet's defaults.
    args, cfg = parse("peaks"), TrainConfig()
    for option in ("mode", "m1", "m2", "optimizer", "iterations", "seed", "init_scale",
                   "tikhonov", "ddt", "classifier_reg", "validate_every", "patience",
                   "checkpoint_every", "shuffle", "relax"):
        assert getattr(args, option) == getattr(cfg, option), option
    assert (args.levels, args.cf, args.abs_tol) == (cfg.mgrit.max_levels, cfg.mgrit.cfactor,
                                                    cfg.mgrit.abs_tol)
    net = ResNet((2,), 3, width=2, nlayers=2)
    assert (args.tstop, args.activation, args.kernel) == (net.tstop, net.activation_name,
                                                          net.kernel)
    assert library_defaults()["mode"] == "auto" and library_defaults()["seed"] == 1


def test_presets_and_explicit_options():
    quick, paper = parse("digits"), parse("digits", "--preset", "paper")
    assert (quick.layers, quick.width, quick.optimizer, quick.batch, quick.shuffle) == (
        8, 4, "adam", 100, True)
    assert (paper.layers, paper.width, paper.optimizer, paper.batch, paper.shuffle) == (
        32, 8, "lbfgs", None, False)
    settings = lambda args: {k: v for k, v in vars(args).items()  # noqa: E731
                             if k not in ("usage_error", "preset")}
    assert settings(parse("peaks", "--preset", "paper")) == settings(parse("peaks"))
    mine = parse("digits", "--layers", "12", "--no-shuffle", "--optimizer", "sgd")
    assert (mine.layers, mine.shuffle, mine.optimizer, mine.batch) == (12, False, "sgd", 100)
    assert preset("quick", "digits")["lr"] == quick.lr == 0.02


@pytest.mark.parametrize("args, message", [
    (["train", "peaks", "--activation", "sigmoid"], "invalid choice: 'sigmoid'"),
    (["train", "peaks", "--width", "1", "--opening", "replicate"], "width (1)"),
    (["train", "peaks", "--width", "1", "--opening", "zero-pad"], "width (1)"),
    (["train", "peaks", "--resume"], "--resume needs --checkpoint"),
    (["train", "peaks", "--layers", "0"], "--layers: must be >= 1, got 0"),
    (["train", "peaks", "--cf", "1"], "--cf: must be >= 2, got 1"),
    (["train", "peaks", "--cf", "8,1"], "--cf: must be >= 2, got 1 in '8,1'"),
    (["train", "peaks", "--cf", "8,x"], "--cf: expected an integer, or integers separated by "
                                        "commas (level 0 first), got '8,x'"),
    (["train", "peaks", "--relax", "FC"], "--relax: invalid choice: 'FC'"),
    (["train", "peaks", "--lr", "-1"], "--lr: must be > 0, got -1"),
    (["train", "peaks", "--abs-tol", "abc"], "--abs-tol: expected a number, got 'abc'"),
    (["train", "peaks", "--tol", "abc"], "--tol: expected a number, got 'abc'"),
    (["train", "peaks", "--mode", "fast"], "invalid choice: 'fast'"),
    (["train", "peaks", "--target-accuracy", "95"], "--target-accuracy: must be in (0, 1]"),
    (["train", "nosuchfile.npy"], "'nosuchfile.npy' is neither peaks nor digits"),
    (["train", "peaks", "--labels", "y.csv"], "--labels does not apply"),
    (["train", "peaks", "--momentum", "0.5"], "--momentum applies to --optimizer sgd"),
    (["train", "peaks", "--data", "no/such/dir"], "no/such/dir"),
    (["train", "peaks", "--kernel", "2"], "kernel must be odd"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_bad_options_exit_2_naming_the_value(args, message):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    # one line first, the usage only on request
    first = proc.stderr.splitlines()[0]
    assert first.startswith("braidpy") and ": error: " in first, proc.stderr
    assert "usage:" not in proc.stderr and "--help)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_train_help_is_short_and_help_all_shows_every_option(capsys):
    """`braidpy train --help` fits a screen (the options a first run needs, grouped);
    --help-all shows every option the parser takes, and each still parses."""
    status, brief, _ = in_process(capsys, "train", "--help")
    assert status == 0 and len(brief.splitlines()) <= 60, brief
    assert "--help-all" in brief and "--layers N" in brief and "--grid D,S,L" in brief
    assert "--m1" not in brief and "--tikhonov" not in brief
    status, full, _ = in_process(capsys, "train", "--help-all")
    assert status == 0 and len(full.splitlines()) > 2 * len(brief.splitlines()), full
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    shown = [o for a in train._actions if a.help != "==SUPPRESS==" for o in a.option_strings]
    for option in shown:
        assert re.search(rf"(^|[\s\[,]){re.escape(option)}\b", full), option
    hidden = [o for o in shown if not re.search(rf"\s{re.escape(o)}\b", brief)]
    assert "--relax" in hidden and "--quality-floor" in hidden
    args = build_parser().parse_args(["train", "peaks", "--relax", "F", "--m1", "1",
                                      "--tikhonov", "0.1", "--csv", "x.csv"])
    assert (args.relax, args.m1, args.tikhonov, args.csv) == ("F", 1, 0.1, "x.csv")


@pytest.mark.parametrize("args, message, helps", [
    (["train", "peaks", "--iteratons", "5"], "braidpy train: error: unrecognized arguments: "
     "--iteratons 5 (--iteratons: did you mean --iterations?)", "braidpy train --help"),
    (["plan", "--calibration", "c.json", "--network", "peaks", "-P", "2", "--trails=1"],
     "(--trails: did you mean --trials?)", "braidpy plan --help"),
    (["evaluate", "run.ckpt", "peaks", "--zzz"], "unrecognized arguments: --zzz\n",
     "braidpy evaluate --help"),
])
def test_an_unknown_option_is_named_by_its_subcommand_with_the_closest(args, message, helps):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and f"(options: {helps})" in proc.stderr, proc.stderr


def test_a_run_shorter_than_validate_every_still_validates_at_its_end(tmp_path):
    ok("train", "peaks", *TINY[:-1], "2", "--validate-every", "5", "--log",
       tmp_path / "l.jsonl", "--quiet")
    _, steps, _ = read_log(tmp_path / "l.jsonl")
    assert "val_accuracy" not in steps[0] and 0 <= steps[-1]["val_accuracy"] <= 1


def test_bare_braidpy_prints_help():
    proc = cli()
    assert proc.returncode == 0 and "usage: braidpy" in proc.stdout
    assert "train" in proc.stdout and proc.stderr == ""


def test_abs_tol_is_the_documented_spelling_and_tol_a_hidden_alias():
    """The library's word (abs_tol) on the command line; the earlier --tol still works
    but is no longer shown."""
    for option in ("--abs-tol", "--tol"):
        args = parse("peaks", option, "1e-7")
        assert args.abs_tol == 1e-7 and make_config(args).mgrit.abs_tol == 1e-7, option
    assert parse("peaks").abs_tol == TrainConfig().mgrit.abs_tol
    text = build_parser()._subparsers._group_actions[0].choices["train"].format_help(full=True)
    assert "--abs-tol TOL" in text and not re.search(r"(?<![\w-])--tol\b", text)


def test_tstop_is_the_documented_spelling_and_T_a_hidden_alias():
    """The library's word (tstop) on the command line; the earlier --T still works but
    is no longer shown."""
    for option in ("--tstop", "--T"):
        args = parse("peaks", "--layers", "8", option, "2.5")
        net = make_network(args, np.zeros((1, 2)), np.eye(5))
        assert args.tstop == 2.5 and net.tstop == 2.5, option
    assert parse("peaks").tstop == ResNet((2,), 3, width=2, nlayers=2).tstop
    text = build_parser()._subparsers._group_actions[0].choices["train"].format_help(full=True)
    assert "--tstop T" in text and not re.search(r"(?<![\w-])--T\b", text)


def test_relax_and_per_level_cf_parse_into_the_config():
    args = parse("peaks", "--relax", "F", "--cf", "8,4", "--levels", "3")
    assert (args.relax, args.cf) == ("F", (8, 4))
    cfg = make_config(args)
    assert (cfg.relax, cfg.cfactor) == ("F", {0: 8, "default": 4})
    assert (cfg.mgrit.nrelax, cfg.mgrit.cfactor, cfg.mgrit.max_levels) == (
        0, {0: 8, "default": 4}, 3)
    args = parse("peaks", "--relax", "FCFCF", "--cf", "8")
    assert (args.cf, make_config(args).mgrit.nrelax, make_config(args).mgrit.cfactor) == (
        8, 2, 8)
    assert parse("peaks").relax == "FCF" and make_config(parse("peaks")).mgrit.nrelax == 1


def test_relax_and_cf_reach_the_log_and_the_checkpoint(tmp_path):
    ck, log = tmp_path / "run.ckpt", tmp_path / "log.jsonl"
    more = ["--mode", "oneshot", "--layers", "16", "--relax", "F", "--cf", "4,2", "--levels",
            "3", "--quiet"]
    ok("train", "peaks", *TINY, *more, "--checkpoint", ck, "--log", log)
    header, steps, _ = read_log(log)
    config = header["config"]
    assert (config["relax"], config["cfactor"]) == ("F", {"0": 4, "default": 2})
    assert (config["mgrit"]["nrelax"], config["mgrit"]["max_levels"]) == (0, 3)
    # state m1 = 2 and adjoint m2 = 2 iterations of F-relaxation on 16, 4, 2 intervals
    # (tests/train_cases.solve_calls), plus one state solve without its final F sweep
    # per line-search trial
    from train_cases import solve_calls

    solve = solve_calls(16, 2, 3, [4, 2], nrelax=0)
    trial = solve - (16 - 16 // 4)  # a line-search trial leaves out the final F sweep
    assert [r["steps"] for r in steps[1:]] == [
        2 * solve + trial * r["line_search_trials"] for r in steps[1:]]
    assert load_checkpoint(ck)["config"]["relax"] == "F"
    proc = cli("train", "peaks", *TINY[:-1], "5", *more[:-1], "--relax", "FCF",
               "--checkpoint", ck, "--resume")
    assert proc.returncode == 2 and "other settings: mgrit, relax" in proc.stderr, proc.stderr


def test_features_file_without_labels(tmp_path):
    np.save(tmp_path / "X.npy", np.zeros((10, 3)))
    proc = cli("train", tmp_path / "X.npy")
    assert proc.returncode == 2 and "needs --labels" in proc.stderr


def test_resume_with_other_settings_is_a_usage_error(tmp_path):
    ck = tmp_path / "run.ckpt"
    ok("train", "peaks", *TINY, "--checkpoint", ck, "--quiet")
    proc = cli("train", "peaks", *TINY, "--checkpoint", ck, "--resume", "--lr", "0.5")
    assert proc.returncode == 2 and "other settings: lr" in proc.stderr, proc.stderr


@pytest.mark.parametrize("nranks, extra", [
    (1, []), (2, []),
    (1, ["--mode", "serial", "--iterations", "2"]),  # a non-finite loss at the last step
])
def test_failure_in_training_prints_once_and_exits_1(nranks, extra):
    proc = cli("train", "peaks", *TINY, "--optimizer", "sgd", "--lr", "1e200", *extra,
               nranks=nranks)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("braidpy train: error:") == 1, proc.stderr
    assert "diverge" in proc.stderr and "Traceback" not in proc.stderr


def test_checkpoint_write_failure_stops_every_rank(tmp_path):
    # Rank 0 fails to write (the checkpoint's temporary file is a directory): rank 1 must
    # not wait for it in the next MGRIT solve.
    (tmp_path / "run.ckpt.tmp").mkdir()
    proc = cli("train", "peaks", *TINY, "--checkpoint", tmp_path / "run.ckpt",
               "--checkpoint-every", "1", nranks=2)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("error: --checkpoint") == 1, proc.stderr


def test_empty_npy_names_the_file(tmp_path):
    (tmp_path / "X.npy").write_bytes(b"")
    np.savetxt(tmp_path / "y.csv", [0, 1], fmt="%d")
    proc = cli("train", tmp_path / "X.npy", "--labels", tmp_path / "y.csv")
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path / 'X.npy'}: not a readable .npy file (the file is empty)" in proc.stderr
    assert "EOFError" not in proc.stderr


def test_npz_features_are_read_as_arrays(tmp_path):
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2, 20)
    np.savez(tmp_path / "X.npz", features=rng.standard_normal((20, 3)) + labels[:, None])
    np.savetxt(tmp_path / "y.csv", labels, fmt="%d")
    ok("train", tmp_path / "X.npz", "--labels", tmp_path / "y.csv", "--layers", "8",
       "--iterations", "1", "--quiet")
    np.savez(tmp_path / "two.npz", a=np.zeros((20, 3)), b=np.zeros(20))
    proc = cli("train", tmp_path / "two.npz", "--labels", tmp_path / "y.csv")
    assert proc.returncode == 2 and "2 arrays (a, b); give a file with one array" in proc.stderr
    assert "codec" not in proc.stderr


@pytest.mark.parametrize("option, path", [
    ("--checkpoint", "afile/run.ckpt"),       # its folder is a file: cannot be created
    ("--plot", "afile/run.png"),
    ("--plot", "adir"),                       # an existing folder, not a figure file
    ("--plot", "run.txt"),                    # not a figure type
    ("--log", "afile/log.jsonl"),
    ("--csv", "afile/m.csv"),
])
def test_unwritable_outputs_are_refused_before_training(tmp_path, option, path):
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    proc = cli("train", "peaks", *TINY, option, tmp_path / path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{option} {tmp_path / path}" in proc.stderr and ": error: " in proc.stderr
    assert progress_lines(proc) == []  # no step was taken


def test_unwritable_checkpoint_is_refused_on_every_rank(tmp_path):
    (tmp_path / "afile").write_text("")
    proc = cli("train", "peaks", *TINY, "--checkpoint", tmp_path / "afile" / "c.ckpt",
               nranks=2)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("cannot write there") == 1 and progress_lines(proc) == []
    assert "is a file, not a folder" in proc.stderr


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e999"])
def test_non_finite_numbers_are_refused(value):
    proc = cli("train", "peaks", f"--init-scale={value}")
    assert proc.returncode == 2, proc.stderr
    assert "--init-scale: must be a finite number" in proc.stderr or \
        "--init-scale: must be >= 0" in proc.stderr, proc.stderr


def test_resume_on_other_data_is_a_usage_error_naming_both_fingerprints(tmp_path):
    ck = tmp_path / "run.ckpt"
    ok("train", "peaks", *TINY, "--checkpoint", ck, "--log", tmp_path / "a.jsonl", "--quiet")
    theirs = read_log(tmp_path / "a.jsonl")[0]["data_fingerprint"]
    more = [*TINY, "--iterations", "5"]
    for other in (["--samples", "120"], ["--validation-samples", "60"]):
        proc = cli("train", "peaks", *more, *other, "--checkpoint", ck, "--resume",
                   "--log", tmp_path / "b.jsonl")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "other data" in proc.stderr and theirs in proc.stderr
        assert "--resume-on-new-data" in proc.stderr
        mine = re.search(r"this run's is (sha256:[0-9a-f]{16})", proc.stderr).group(1)
        assert mine != theirs
    proc = ok("train", "peaks", *more, "--samples", "120", "--checkpoint", ck, "--resume",
              "--resume-on-new-data", "--log", tmp_path / "b.jsonl")
    header, steps, end = read_log(tmp_path / "b.jsonl")
    assert header["train_samples"] == 120 and [r["iteration"] for r in steps] == [1, 2, 3, 4, 5]
    assert "resuming on other data" in proc.stderr


# ------------------------------------------------------------------ runs and files


def test_serial_run_writes_a_json_lines_log(tmp_path):
    log = tmp_path / "out" / "log.jsonl"
    proc = ok("train", "peaks", *TINY, "--log", log)
    header, steps, end = read_log(log)
    assert header["config"]["mode"] == "oneshot" and header["config"]["iterations"] == 3
    assert header["network"]["layers"] == 8 and "8 x dense 8" in header["architecture"]
    assert (header["train_samples"], header["validation_samples"], header["ranks"]) == (100, 50, 1)
    # braidpy train keeps freed memory (braidpy.perf.allocator) and logs how
    assert header["allocator"].startswith("glibc trim threshold 1073741824 B"), header
    assert [r["iteration"] for r in steps] == [1, 2, 3]
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert all(r["steps"] > 0 for r in steps)
    assert all(r["primal_iterations"] == r["adjoint_iterations"] == 2 for r in steps)
    assert all(0 <= r["val_accuracy"] <= 1 for r in steps)
    assert end["stop_reason"] == "iterations" and end["steps"] == 3
    assert end["step_calls"] == sum(r["steps"] for r in steps)
    # Not a terminal: one plain progress line per step on stderr, the summary on stdout.
    assert progress_lines(proc) == ["step 1/3", "step 2/3", "step 3/3"]
    assert "\r" not in proc.stderr
    assert "best validation accuracy" in proc.stdout


def test_quiet_prints_nothing(tmp_path):
    proc = ok("train", "peaks", *TINY, "--quiet")
    assert proc.stdout == proc.stderr == ""


@pytest.mark.parametrize("mode, name", [("oneshot", "run.png"), ("serial", "run.pdf")])
def test_plot_writes_the_file_it_names(tmp_path, mode, name):
    target = tmp_path / "new" / "folder" / name
    ok("train", "peaks", *TINY, "--mode", mode, "--plot", target, "--quiet")
    assert [p.name for p in target.parent.iterdir()] == [name]  # that file and no other
    assert target.is_file() and target.stat().st_size > 1000
    assert target.read_bytes()[:4] == {".png": b"\x89PNG", ".pdf": b"%PDF"}[target.suffix]


def test_features_file_dense_and_conv(tmp_path):
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 3, 40)
    np.savetxt(tmp_path / "y.csv", labels, fmt="%d")
    np.save(tmp_path / "vectors.npy", rng.standard_normal((40, 3)) + labels[:, None])
    np.save(tmp_path / "images.npy", rng.standard_normal((40, 2, 4, 4)))
    for features, extra, kind in (("vectors.npy", ["--opening", "zero-pad", "--width", "4"],
                                   "dense"), ("images.npy", ["--layers", "4"], "conv")):
        ok("train", tmp_path / features, "--labels", tmp_path / "y.csv", "--iterations", "2",
           "--validation-fraction", "0.25", "--log", tmp_path / "log.jsonl", *extra)
        header, steps, _ = read_log(tmp_path / "log.jsonl")
        assert header["network"]["kind"] == kind and header["network"]["kernels"] == "numpy"
        assert (header["train_samples"], header["validation_samples"]) == (30, 10)
        assert len(steps) == 2


def test_peaks_reference_data():
    proc = ok("train", "peaks", "--data", "tests/data/peaks", "--layers", "4",
              "--iterations", "1", "--mode", "serial",
              cwd=os.path.dirname(os.path.dirname(__file__)))
    assert "5000 training / 200 validation" in proc.stderr


@pytest.mark.parametrize("extra", [[], ["--optimizer", "adam", "--batch", "30", "--shuffle"]])
def test_resume_continues_to_the_same_history(tmp_path, extra):
    six = [*TINY[:-1], "6", *extra]
    ok("train", "peaks", *six, "--log", tmp_path / "full.jsonl", "--quiet")
    ck = tmp_path / "run.ckpt"
    ok("train", "peaks", *TINY, *extra, "--checkpoint", ck, "--quiet")
    proc = ok("train", "peaks", *six, "--checkpoint", ck, "--resume",
              "--log", tmp_path / "resumed.jsonl")
    assert "resumed from" in proc.stderr and progress_lines(proc) == ["step 4/6", "step 5/6",
                                                                      "step 6/6"]
    header, resumed, end = read_log(tmp_path / "resumed.jsonl")
    _, full, _ = read_log(tmp_path / "full.jsonl")
    assert header["resumed_at"] == 3 and end["steps"] == 6
    assert steps_without_time(resumed) == steps_without_time(full)


def test_resume_under_two_ranks_equals_the_uninterrupted_run(tmp_path):
    six = [*TINY[:-1], "6", "--layers", "16"]
    ok("train", "peaks", *six, "--log", tmp_path / "full.jsonl", "--quiet")
    ck = tmp_path / "run.ckpt"
    ok("train", "peaks", *TINY, "--layers", "16", "--checkpoint", ck, "--quiet", nranks=2)
    ok("train", "peaks", *six, "--checkpoint", ck, "--resume", "--log",
       tmp_path / "resumed.jsonl", "--quiet", nranks=2)
    _, full, _ = read_log(tmp_path / "full.jsonl")
    header, resumed, _ = read_log(tmp_path / "resumed.jsonl")
    assert header["ranks"] == 2  # one MPI world: not two unconnected copies
    for key in ("loss", "objective", "gradient_norm", "val_accuracy", "step_size", "steps"):
        assert [r.get(key) for r in resumed] == [r.get(key) for r in full], key  # bitwise
    assert load_checkpoint(ck)["iteration"] == 6


def test_csv_metrics(tmp_path):
    ok("train", "peaks", *TINY, "--csv", tmp_path / "m.csv", "--log", tmp_path / "l.jsonl",
       "--quiet")
    rows = (tmp_path / "m.csv").read_text().splitlines()
    assert rows[0].startswith("iteration,epoch,loss,objective,gradient_norm")
    _, steps, _ = read_log(tmp_path / "l.jsonl")
    assert len(rows) == 1 + len(steps) == 4
    columns = rows[0].split(",")
    for row, record in zip(rows[1:], steps):
        values = dict(zip(columns, row.split(",")))
        assert float(values["loss"]) == record["loss"]  # all the digits
        assert float(values["primal_residual"]) == record["primal_residuals"][-1]
        assert int(values["iteration"]) == record["iteration"]


def test_verbosity_levels(tmp_path):
    quiet = ok("train", "peaks", *TINY, "--layers", "4", "-q")
    assert quiet.stderr == quiet.stdout == ""
    default = ok("train", "peaks", *TINY, "--layers", "4")
    assert "braidpy: WARNING: --layers 4 with --cf 4 leaves a coarse grid of 1" in default.stderr
    assert "braidpy.train:" not in default.stderr
    info = ok("train", "peaks", *TINY, "-v")
    assert "braidpy.train: stopped after 3 steps" in info.stderr
    assert "braidpy.train: step 1/3" not in info.stderr
    debug = ok("train", "peaks", *TINY, "-vv")
    assert "braidpy.train: step 1/3" in debug.stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    ok("train", "peaks", "--samples", "300", "--validation-samples", "100", "--layers", "8",
       "--iterations", "6", "--checkpoint", folder / "run.ckpt", "--log",
       folder / "log.jsonl", "--quiet")
    return folder


def test_evaluate_reports_the_runs_validation_accuracy(trained):
    _, steps, end = read_log(trained / "log.jsonl")
    proc = ok("evaluate", trained / "run.ckpt", "peaks", "--samples", "300",
              "--validation-samples", "100", "--json")
    result = json.loads(proc.stdout)
    assert result["samples"] == 100 and result["iteration"] == 6
    assert result["accuracy"] == pytest.approx(steps[-1]["val_accuracy"], abs=1e-12)
    best = json.loads(ok("evaluate", trained / "run.ckpt", "peaks", "--samples", "300",
                         "--validation-samples", "100", "--json", "--best").stdout)
    assert best["accuracy"] == pytest.approx(end["best_accuracy"], abs=1e-12)
    assert best["iteration"] == end["best_iteration"], (best, end)  # the best step's number
    text = ok("evaluate", trained / "run.ckpt", "peaks", "--split", "train", "--samples",
              "300").stdout
    assert "train (300 samples)" in text and "accuracy" in text
    proc = cli("evaluate", trained / "run.ckpt", "digits")
    assert proc.returncode == 2 and "takes (2,)" in proc.stderr


def test_predict_writes_class_ids_and_probabilities(trained, tmp_path):
    from braidpy import data

    X, C = data.peaks(50, 9)
    np.save(tmp_path / "X.npy", X)
    ok("predict", trained / "run.ckpt", tmp_path / "X.npy", "-o", tmp_path / "ids.csv")
    ok("predict", trained / "run.ckpt", tmp_path / "X.npy", "-o", tmp_path / "ids.npy")
    ok("predict", trained / "run.ckpt", tmp_path / "X.npy", "-o", tmp_path / "p.npy",
       "--probabilities")
    ids = np.loadtxt(tmp_path / "ids.csv", dtype=int)
    state = load_checkpoint(trained / "run.ckpt")
    net = ResNet(**{k: (tuple(v) if k == "input_shape" else v)
                    for k, v in state["network"].items()})
    np.testing.assert_array_equal(ids, net.predict(state["params"], X))
    np.testing.assert_array_equal(np.load(tmp_path / "ids.npy"), ids)
    p = np.load(tmp_path / "p.npy")
    assert p.shape == (50, 5) and np.allclose(p.sum(axis=1), 1)
    np.testing.assert_array_equal(p.argmax(axis=1), ids)
    np.save(tmp_path / "bad.npy", np.zeros((4, 3)))
    proc = cli("predict", trained / "run.ckpt", tmp_path / "bad.npy", "-o", tmp_path / "o.npy")
    assert proc.returncode == 2 and "samples of shape (3,)" in proc.stderr


@pytest.mark.parametrize("mode", ["oneshot", "exact", "serial"])
def test_two_ranks_log_the_same_losses_as_one(tmp_path, mode):
    logs = {}
    for n in (1, 2):
        logs[n] = tmp_path / f"{n}.jsonl"
        ok("train", "peaks", *TINY, "--layers", "16", "--mode", mode, "--log", logs[n],
           "--quiet", nranks=n)
    (h1, s1, e1), (h2, s2, e2) = read_log(logs[1]), read_log(logs[2])
    assert (h1["ranks"], h2["ranks"]) == (1, 2)
    for key in ("loss", "objective", "gradient_norm", "val_accuracy", "step_size", "steps",
                "primal_iterations", "adjoint_iterations"):
        assert [r.get(key) for r in s2] == [r.get(key) for r in s1], key  # bitwise
    assert len(s1) == len(s2) > 0
    for key in ("primal_residuals", "adjoint_residuals"):  # norms summed per rank first
        for a, b in zip(s1, s2):
            np.testing.assert_allclose(b.get(key, []), a.get(key, []), rtol=1e-10, atol=1e-30)
    assert e1["best_accuracy"] == e2["best_accuracy"]


@pytest.fixture
def conv_checkpoint(tmp_path, capsys):
    """A one-step checkpoint of a tiny conv net on 12 images (1, 3, 3): (images, labels
    file, checkpoint)."""
    rng = np.random.default_rng(11)
    images = rng.standard_normal((12, 1, 3, 3))
    np.save(tmp_path / "images.npy", images)
    np.savetxt(tmp_path / "y.csv", rng.integers(0, 3, 12), fmt="%d")
    status, _, err = in_process(capsys, "train", tmp_path / "images.npy", "--labels",
                                tmp_path / "y.csv", "--mode", "serial", "--layers", "2",
                                "--width", "2", "--iterations", "1", "--validation-fraction",
                                "0", "--checkpoint", tmp_path / "run.ckpt", "-q")
    assert status == 0, err
    return images, tmp_path / "y.csv", tmp_path / "run.ckpt"


def test_predict_and_evaluate_take_flat_rows_of_an_image_network(conv_checkpoint, tmp_path,
                                                                   capsys):
    """A conv net's samples as flat rows (N, C*H*W), as a text file holds them, or as
    single-channel images without their channel axis (N, H, W) are reshaped to the
    network's (C, H, W); rows of another length are refused naming the file and the
    shapes the network takes."""
    images, labels, ckpt = conv_checkpoint
    flat = images.reshape(12, 9)
    np.save(tmp_path / "flat.npy", flat)
    np.savetxt(tmp_path / "flat.csv", flat, delimiter=",", fmt="%.17g")
    np.save(tmp_path / "no_channel.npy", images[:, 0])  # (N, H, W): one channel, no axis
    ids = {}
    for name in ("images.npy", "flat.npy", "flat.csv", "no_channel.npy"):
        status, _, err = in_process(capsys, "predict", ckpt, tmp_path / name, "-o",
                                    tmp_path / f"{name}.ids.npy")
        assert status == 0, err
        ids[name] = np.load(tmp_path / f"{name}.ids.npy")
    np.testing.assert_array_equal(ids["flat.npy"], ids["images.npy"])
    np.testing.assert_array_equal(ids["flat.csv"], ids["images.npy"])
    np.testing.assert_array_equal(ids["no_channel.npy"], ids["images.npy"])
    results = {}
    for name in ("images.npy", "flat.csv"):
        status, out, err = in_process(capsys, "evaluate", ckpt, tmp_path / name, "--labels",
                                      labels, "--split", "all", "--json")
        assert status == 0, err
        results[name] = json.loads(out)
    assert results["flat.csv"]["samples"] == 12
    assert results["flat.csv"]["loss"] == pytest.approx(results["images.npy"]["loss"],
                                                        rel=1e-14)
    assert results["flat.csv"]["accuracy"] == results["images.npy"]["accuracy"]
    np.save(tmp_path / "short.npy", flat[:, :8])
    for command in (["predict", ckpt, tmp_path / "short.npy", "-o", tmp_path / "o.npy"],
                    ["evaluate", ckpt, tmp_path / "short.npy", "--labels", labels]):
        status, _, err = in_process(capsys, *command)
        assert status == 2, err
        assert (f"{tmp_path / 'short.npy'}" in err and "samples of shape (8,), but the "
                "checkpoint's network takes (1, 3, 3), (3, 3) (one channel) or flat rows of "
                "9 numbers" in err), err
    assert not (tmp_path / "o.npy").exists()


# ------------------------------------------------------------------ progress and script


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_redraws_one_line():
    pytest.importorskip("tqdm")
    out = FakeTerminal()
    bar = Progress(total=4, stream=out)
    record = {"iteration": 2, "loss": 0.25, "val_accuracy": 0.5, "seconds": 0.5,
              "primal_iterations": 2, "primal_residuals": [1e-3, 2e-4],
              "adjoint_iterations": 2, "adjoint_residuals": [3e-3]}
    bar.update(record)
    bar.update(dict(record, iteration=4))
    bar.close()
    text = out.getvalue()
    assert text.count("\r") >= 2 and text.endswith("\n") and text.count("\n") == 1
    assert "4/4" in text and "loss 2.500e-01 val 50.0% state 2 it 2.0e-04" in text
    assert "state 2 it r 2.0e-04" in format_step(record, 4)


def test_progress_without_tqdm_prints_plain_lines(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails
    out = FakeTerminal()
    bar = Progress(total=4, stream=out)
    bar.update({"iteration": 1, "loss": 0.5, "seconds": 0.1})
    bar.close()
    assert out.getvalue() == "step 1/4  loss 5.0000e-01  0.10 s\n"


def test_wait_until_read_waits_for_the_reader_of_a_pipe(tmp_path):
    import threading
    import time

    from braidpy.train.progress import wait_until_read

    read, write = os.pipe()
    with os.fdopen(write, "w") as stream, os.fdopen(read, "rb", buffering=0) as reader:
        stream.write("step 3/3\n")
        taken = []
        later = threading.Timer(0.3, lambda: taken.append(reader.read(100)))
        started = time.monotonic()
        later.start()
        assert wait_until_read(stream, timeout=30) is True
        waited = time.monotonic() - started
        later.join()
        assert taken == [b"step 3/3\n"] and 0.25 <= waited < 10, waited
        stream.write("more\n")  # nobody reads: gives up after the timeout
        assert wait_until_read(stream, timeout=0.1) is False
    with open(tmp_path / "f.txt", "w") as stream:  # a file keeps the order itself
        stream.write("x")
        assert wait_until_read(stream, timeout=30) is True


def test_the_summary_is_the_last_line_when_stderr_is_read_late():
    """mpiexec passes a rank's stdout and stderr on through two pipes, in no order
    between them (a step line printed after the summary of `mpiexec -n 2 braidpy train
    digits --grid 2,1,1 --optimizer easgd`). Here a reader that serves stdout at once and
    stderr only every 0.2 s merges the two: the summary must still come last."""
    import threading
    import time

    proc = subprocess.Popen([sys.executable, "-m", "braidpy", "train", "peaks", *TINY],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    merged, lock = [], threading.Lock()

    def forward(pipe, pause):
        while True:
            time.sleep(pause)
            data = os.read(pipe.fileno(), 1 << 16)
            if not data:
                return
            with lock:
                merged.append(data)

    threads = [threading.Thread(target=forward, args=(proc.stdout, 0.0)),
               threading.Thread(target=forward, args=(proc.stderr, 0.2))]
    for thread in threads:
        thread.start()
    try:
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        for thread in threads:
            thread.join()
        proc.stdout.close()
        proc.stderr.close()
    lines = b"".join(merged).decode().splitlines()
    steps = [i for i, line in enumerate(lines) if line.startswith("step ")]
    first = next(i for i, line in enumerate(lines) if line.startswith("stopped after"))
    assert len(steps) == 3 and steps[-1] < first, lines
    assert lines[-1].startswith("layer step calls"), lines


def test_console_script():
    script = shutil.which("braidpy")
    if script is None:
        pytest.skip("the braidpy console script is not on PATH (pip install -e . installs it)")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "train" in proc.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_interrupted_run_exits_130(tmp_path):
    """SIGINT (Ctrl-C) during training: one message on stderr and exit status 130."""
    import signal
    import time

    log = tmp_path / "run.jsonl"
    args = [*TINY[:-2], "--iterations", "100000", "--log", str(log), "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "braidpy", "train", "peaks", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and '"event": "step"' in log.read_text()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no training step within 60 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "braidpy train: interrupted" in err and "Traceback" not in err, err


class RunsCode:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_crafted_pickle_checkpoint_is_refused_on_resume(tmp_path):
    import pickle

    marker, ck = tmp_path / "pwned", tmp_path / "old.ckpt"
    ck.write_bytes(pickle.dumps({"format": "braidpy-train-checkpoint-1",
                                 "state": RunsCode(marker)}))
    proc = cli("train", "peaks", *TINY, "--checkpoint", ck, "--resume")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pickle" in proc.stderr and "arbitrary code" in proc.stderr
    assert not marker.exists()


def test_the_default_mode_is_serial_on_one_layer_rank_and_oneshot_on_several(tmp_path):
    """--mode auto (the default): exact serial backprop where the layers are not split
    (no MGRIT work, no warning), one-shot with layer ranks; the header names what ran."""
    args = ["--samples", "100", "--validation-samples", "50", "--layers", "8",
            "--iterations", "2"]
    one = ok("train", "peaks", *args, "--log", tmp_path / "one.jsonl")
    assert "one layer rank" not in one.stderr
    header, steps, _ = read_log(tmp_path / "one.jsonl")
    assert (header["config"]["mode"], header["mode"]) == ("auto", "serial")
    assert all(r.get("primal_iterations") is None for r in steps), steps
    ok("train", "peaks", *args, "--log", tmp_path / "two.jsonl", "--quiet", nranks=2)
    header, steps, _ = read_log(tmp_path / "two.jsonl")
    assert (header["ranks"], header["mode"]) == (2, "oneshot (m1=2, m2=2)")
    assert all(r["primal_iterations"] == 2 for r in steps)
    ok("train", "peaks", *args, "--grid", "2,1,1", "--log", tmp_path / "data.jsonl",
       "--quiet", nranks=2)
    assert read_log(tmp_path / "data.jsonl")[0]["mode"] == "serial"  # data groups only


def test_one_layer_rank_in_a_layer_parallel_mode_is_pointed_out():
    """On one layer rank MGRIT only adds work (MNIST's quick preset: 3.3 s a one-shot step
    against 0.6 s of serial backprop): the run says so, and not in serial mode."""
    proc = ok("train", "peaks", *TINY)
    assert "one layer rank: --mode oneshot runs MGRIT iterations" in proc.stderr
    proc = ok("train", "peaks", *TINY, "--mode", "serial")
    assert "one layer rank" not in proc.stderr


def test_mgrit_options_in_a_serial_run_are_named_as_unused():
    """On one rank mode auto runs serial backpropagation: --m1/--cf/... would do nothing,
    and the run says so instead of ignoring them silently."""
    proc = ok("train", "peaks", "--samples", "60", "--validation-samples", "20", "--layers",
              "8", "--iterations", "1", "--m1", "1", "--cf=2")
    assert "--m1, --cf have no effect: this run computes gradients by serial " \
           "backpropagation" in proc.stderr, proc.stderr
    quiet = ok("train", "peaks", "--samples", "60", "--validation-samples", "20",
               "--layers", "8", "--iterations", "1", "--mode", "oneshot", "--m1", "1")
    assert "no effect" not in quiet.stderr, quiet.stderr


@pytest.mark.parametrize("nranks", [2, 4])
def test_an_edited_checkpoint_stops_every_rank_of_a_resume_naming_file_and_field(tmp_path,
                                                                                 nranks):
    """Every rank reads the checkpoint through the one validation, so an edit that
    passed before (a NaN optimizer state, a seed beyond int64) stops every rank at once
    with one line naming the file and the field, never a hang or a resumed run."""
    import io
    import zipfile

    ck = tmp_path / "run.ckpt"
    ok("train", "peaks", *TINY, "--optimizer", "adam", "--checkpoint", ck, "--quiet",
       nranks=nranks)
    for field, edit in (("optimizer.m", lambda h, a: a.__setitem__(
                            h["optimizer"]["m"]["__array__"],
                            np.full_like(a[h["optimizer"]["m"]["__array__"]], np.nan))),
                        ("config.seed", lambda h, a: h["config"].__setitem__("seed",
                                                                            10**30))):
        with zipfile.ZipFile(ck) as zf:
            header = json.loads(zf.read("header.json"))
            arrays = {n[:-4]: np.load(io.BytesIO(zf.read(n))) for n in zf.namelist()
                      if n.endswith(".npy")}
        edit(header, arrays)
        bad = tmp_path / f"{field}.ckpt"
        with zipfile.ZipFile(bad, "w") as zf:
            zf.writestr("header.json", json.dumps(header))
            for name, a in arrays.items():
                buf = io.BytesIO()
                np.lib.format.write_array(buf, a, allow_pickle=False)
                zf.writestr(f"{name}.npy", buf.getvalue())
        proc = cli("train", "peaks", *TINY[:-1], "6", "--optimizer", "adam", "--checkpoint",
                   bad, "--resume", "--quiet", nranks=nranks)
        assert proc.returncode in (1, 2), proc.stdout + proc.stderr
        assert proc.stderr.count(f"{bad}: field '{field}'") == 1, proc.stderr
        assert "Traceback" not in proc.stderr
