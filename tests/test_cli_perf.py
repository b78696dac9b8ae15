"""``braidpy calibrate`` and ``braidpy plan`` on the command line (braidpy.perf.commands):
every option explained with its default, and ``--cores`` meaning one thing in both."""

import argparse

import pytest
from cli_runner import in_process
from test_perf_model import made_up

from braidpy.cli import build_parser
from braidpy.perf.calibration import save_calibration
from braidpy.perf.commands import CORES_HELP


def subcommand(name):
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


def options(name):
    return [a for a in subcommand(name)._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("name", ["calibrate", "plan"])
def test_every_option_is_explained_and_shows_its_default(name):
    for action in options(name):
        flag = "/".join(action.option_strings)
        assert action.help and action.help != argparse.SUPPRESS, f"{name} {flag}: no help"
        takes_a_value = action.nargs != 0  # not a switch (--json, -q, -v)
        if takes_a_value:
            assert "(required)" in action.help if action.required else \
                "default" in action.help, f"{name} {flag}: {action.help!r}"


def test_the_help_shows_the_default_values():
    text = subcommand("plan").format_help()
    for shown in ("(default 2 3 4)", "(default 2 4 8 16)", "(default oneshot)",
                  "(default calibrated)", "(default 5)"):
        assert shown in " ".join(text.split()), shown
    text = " ".join(subcommand("calibrate").format_help().split())
    for shown in ("(default 16 256 4096)", "(default 1 4 16)", "(default 5)",
                  "(default cpu)"):
        assert shown in text, shown


def test_cores_means_the_same_in_calibrate_and_plan():
    """The cores the run's ranks have, all hosts together: calibrate measures a run on
    this machine (default its cores), plan predicts the run it plans (default: a core
    per rank)."""
    helps = {name: next(a.help for a in options(name) if "--cores" in a.option_strings)
             for name in ("calibrate", "plan")}
    for name, text in helps.items():
        assert text.startswith(CORES_HELP), (name, text)
    assert "this machine's" in helps["calibrate"] and "a core per rank" in helps["plan"]
    # and what each does with more ranks than cores
    assert "nothing with ranks sharing cores" in " ".join(helps["calibrate"].split())
    assert "a lower bound, not validated" in " ".join(helps["plan"].split())


def test_plan_cores_shares_the_cores_among_more_ranks(tmp_path, capsys):
    path = tmp_path / "cal.json"
    save_calibration(made_up(step=1e-4), str(path))
    run = ["plan", "--calibration", path, "--network", "dense:4:32", "--batch", "64",
           "-P", "4", "--top", "1", "--levels", "2", "--cfactors", "4"]
    status, alone, err = in_process(capsys, *run)
    assert status == 0, err
    status, shared, err = in_process(capsys, *run, "--cores", "2")
    assert status == 0, err
    assert "4 ranks on 2 cores: compute x2; more ranks than cores: a lower bound, not " \
        "validated" in shared and "cores:" not in alone
