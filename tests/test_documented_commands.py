"""Every shell command the documentation shows parses, and the cheap ones run and print
what the text around them says.

Where commands are found
------------------------
README.md and docs/*.md, and the --help texts of ``braidpy`` and of each of its
subcommands (braidpy/cli.py, braidpy/perf/commands.py), ``train --help-all`` too.

* Fenced blocks marked ``bash``, ``sh``, ``shell`` or ``console``, and unmarked ones: a
  line whose first word, after ``VAR=value`` settings and a ``$`` prompt, is one of
  ``COMMAND_WORDS`` is a command. A trailing backslash continues it, `` #`` starts a
  comment, `` && `` joins two commands. In an unmarked block, two or more spaces and then
  text that is not a comment end the command (the rest describes it). In a marked block
  any other line that is not a comment fails the test: a new kind of command needs a
  rule here first.
* ``text`` blocks: a line starting with ``$`` is a command and the lines after it, up to
  the next ``$`` line, are what it prints.
* Prose outside fenced blocks: a code span that starts like a command, or that names a
  script of benchmarks/ or examples/ followed by options (``bench_batched.py --repeats
  3``: run as ``python benchmarks/bench_batched.py``).
* --help: an epilog's example lines (two spaces, the command, two or more spaces, what
  it does) and code spans in backquotes.

Templates and references
------------------------
A command with a placeholder (a word in capitals such as FILE, DIR or P, but not a
relaxation such as F or FCF; ``...``, ``a|b``, ``[optional]``) is a template; a code span
in prose or in --help that argparse refuses only for a missing argument (``braidpy
plan``, ``braidpy train --optimizer``) is a reference. Both are checked by name: the
subcommand exists and every option they name is one that the subcommand (or script)
takes. A command a page shows being refused (``REFUSED``) must be refused with the
words listed.

Complete commands
-----------------
* braidpy, also as ``python -m braidpy`` and under ``mpiexec -n N``: parsed by
  ``braidpy.cli.build_parser()``, and every option spelt as --help shows it (argparse
  also takes abbreviations and the hidden earlier spellings ``--tol`` and ``--T``).
* ``python PATH``: the file exists, and every option the command passes is in the
  output of ``python PATH --help`` (run once per script that is given options).
* ``python -m MODULE``: braidpy's own modules must import.
* pip: every extra named (``".[mpi,train]"``, ``'braidpy-mgrit[gpu]'``, a wheel's
  ``[mpi]``) is one of pyproject.toml's.
* ``bash PATH``: the file exists.

Every complete command is then run (``SESSIONS``), or listed in ``NOT_RUN`` with the
reason, or of a kind that is never run (``NEVER_RUN``: installs, the test suite, builds).
A command in none of them fails the test, and so does an entry that no page shows any
longer (stale).

How commands run
----------------
Each session is one scratch folder; its commands run in the order of their page, after
the session has prepared what a reader brings (a features file, a calibration). braidpy
runs as ``python -m braidpy`` of this interpreter and mpiexec is the tests' own
(tests/test_mpi.py), with ``OMP_NUM_THREADS=1`` (the pages' figures are measured so) and
warnings as errors. Paths into this repository (examples/..., tests/data/peaks) are made
absolute; an output path into it (the README's figure) is written to the scratch folder
instead. A run checks its exit status and what the pages say it prints: each claim is
looked up on the pages (so that an edited figure fails until the session follows it)
and in the output; where a page shows a command's output, the lines that do not depend
on the machine are compared verbatim.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest
from mpi_process import run_mpi
from test_mpi import MPIEXEC

from braidpy.cli import build_parser
from braidpy.train.trainer import RELAXATIONS

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
COMMAND_WORDS = ("braidpy", "mpiexec", "python", "pip", "bash", "apt-get")
SHELL_BLOCKS = ("bash", "sh", "shell", "console")
#: Scripts a page names by file name alone, and where they live.
SCRIPT_FOLDERS = ("benchmarks", "examples")
#: Files a page's command runs that the page itself defines (not in the repository).
PAGE_FILES = {"script.py": "the quick start's program, saved by the reader"}
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="error")
#: Every page, spaces and line breaks collapsed (what the pages say is looked up here).
PAGE_TEXT = " ".join(" ".join(p.read_text().split()) for p in PAGES)


# ------------------------------------------------------------------ finding commands


@dataclass(frozen=True)
class Shown:
    """A command as a page shows it."""

    where: str  # page:line, or "braidpy train --help"
    text: str  # one line, comment and description cut off
    inline: bool  # a code span in prose or --help (may be a reference)
    output: Tuple[str, ...] = ()  # what the page shows it printing


def _split_and(text: str) -> List[str]:
    return [part.strip() for part in text.split(" && ") if part.strip()]


def _first_word(text: str) -> str:
    try:  # a quoted VAR="a b" setting is one word
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)  # VAR=value settings
    return words[0] if words else ""


def _starts_like_a_command(text: str) -> bool:
    return _first_word(text) in COMMAND_WORDS


def _script_reference(text: str) -> Optional[str]:
    """``bench_x.py --opt ...`` or ``benchmarks/bench_x.py --opt ...`` as ``python
    benchmarks/bench_x.py --opt ...`` (a script named with options; None otherwise)."""
    words = text.split()
    if len(words) < 2 or not words[0].endswith(".py"):
        return None
    name = words[0]
    for folder in SCRIPT_FOLDERS:
        path = name if name.startswith(folder + "/") else f"{folder}/{name}"
        if (ROOT / path).is_file():
            return " ".join(["python", path] + words[1:])
    return None


def _page_name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _block_commands(page: Path) -> List[Shown]:
    """The commands of the page's fenced shell blocks and the ``$`` lines of its text
    blocks (with what they print)."""
    found: List[Shown] = []
    lines = page.read_text().splitlines()
    lang: Optional[str] = None  # None: outside a fenced block
    number = 0  # lines read
    while number < len(lines):
        line, number = lines[number], number + 1
        fence = re.match(r"^\s*```\s*(\S*)", line)
        if fence:
            lang = fence.group(1) if lang is None else None
            continue
        if lang is None or lang not in SHELL_BLOCKS + ("", "text"):
            continue
        where, text = f"{_page_name(page)}:{number}", line.strip()
        while text.endswith("\\") and number < len(lines):  # continued on the next line
            text, number = text[:-1] + " " + lines[number].strip(), number + 1
        if lang == "text":
            if text.startswith("$ "):
                output = []
                while number < len(lines) and not lines[number].startswith(("$ ", "```")):
                    output.append(lines[number])
                    number += 1
                found.append(Shown(where, " ".join(text[2:].split()), False, tuple(output)))
            continue
        text = re.sub(r"^\$\s+", "", text)  # a prompt
        text = re.sub(r"(^|\s)#(\s.*)?$", "", text).strip()  # a comment
        if lang == "":
            text = re.split(r"\s{2,}", text)[0]  # what follows describes the command
        if not text:
            continue
        if not _starts_like_a_command(text):
            assert lang == "", (f"{where}: {text!r} in a {lang} block is not a command of "
                                f"{COMMAND_WORDS}: give it a rule in {Path(__file__).name}")
            continue
        found += [Shown(where, part, False) for part in _split_and(" ".join(text.split()))]
    return found


def _spans(text: str) -> List[Tuple[int, str]]:
    """Code spans (line number, one-line text) of text outside its fenced blocks."""
    kept, inside = [], False
    for line in text.splitlines():
        if re.match(r"^\s*```", line):
            inside = not inside
            kept.append("")
        else:
            kept.append("" if inside else line)
    prose = "\n".join(kept)
    return [(prose.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()))
            for m in re.finditer(r"`([^`]+)`", prose)]


def _inline_commands(text: str, where: str) -> List[Shown]:
    found = []
    for line, span in _spans(text):
        if not _starts_like_a_command(span):
            span = _script_reference(span) or ""
        for part in _split_and(span):
            if part:
                found.append(Shown(where.format(line=line), part, True))
    return found


def _subparsers(parser):
    """The parser's subcommands (argparse's _SubParsersAction)."""
    return next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict))


def _help_texts() -> Dict[str, str]:
    parser = build_parser()
    texts = {"braidpy --help": parser.format_help()}
    for name, sub in _subparsers(parser).choices.items():
        texts[f"braidpy {name} --help"] = sub.format_help()
        if getattr(sub, "brief", None) is not None:  # --help shows the common options
            texts[f"braidpy {name} --help-all"] = sub.format_help(full=True)
    return texts


@functools.lru_cache(maxsize=None)
def shown_commands() -> Tuple[Shown, ...]:
    found: List[Shown] = []
    for page in PAGES:
        text = page.read_text()
        found += _block_commands(page)
        found += _inline_commands(text, _page_name(page) + ":{line}")
    for where, text in _help_texts().items():
        for line in text.splitlines():
            if re.match(r"^  (braidpy|mpiexec) ", line):
                example = re.split(r"\s{2,}", line.strip())[0]
                found.append(Shown(where, " ".join(example.split()), False))
        found += _inline_commands(text, where)
    return tuple(found)


# ------------------------------------------------------------------ reading a command


@dataclass(frozen=True)
class Command:
    """A shown command taken apart: settings, launcher, program and arguments."""

    env: Dict[str, str]
    ranks: Optional[int]  # mpiexec -n N; None: not under mpiexec
    program: str  # "braidpy", "script", "module", "pip", "bash"
    target: str  # the script, module or pip subcommand ("" for braidpy)
    args: Tuple[str, ...]
    template: bool


PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(,[A-Z][A-Z0-9_]*)*$")
#: Words in capitals that are values, not placeholders: the MGRIT relaxations.
LITERALS = set(RELAXATIONS)


def _is_placeholder(word: str) -> bool:
    return ("..." in word or "…" in word or "|" in word or word.startswith("[")
            or word.endswith("]") and "[" not in word
            or bool(PLACEHOLDER.match(word)) and word not in LITERALS)


def read_command(text: str) -> Command:
    words = shlex.split(text)
    env = {}
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    template = any(_is_placeholder(w) for w in words)
    ranks: Optional[int] = None
    if words and words[0] == "mpiexec":
        words.pop(0)
        while words and words[0] in ("-n", "-np"):
            words.pop(0)
            count = words.pop(0) if words else ""
            ranks = int(count) if count.isdigit() else 0  # 0: a placeholder (P)
    if not words or words[0].startswith("-"):  # mpiexec's, or a fragment of a command
        return Command(env, ranks, "", "", tuple(words), True)
    word = words.pop(0)
    if word == "python" and words[:2] == ["-m", "braidpy"]:
        words, word = words[2:], "braidpy"
    if word == "braidpy":
        return Command(env, ranks, "braidpy", "", tuple(words), template)
    if word == "python" and words and words[0] == "-m":
        return Command(env, ranks, "module", words[1], tuple(words[2:]), template)
    if word == "python":
        return Command(env, ranks, "script", words[0], tuple(words[1:]), template)
    if word in ("pip", "bash"):
        target = words.pop(0) if word == "pip" and words else (words[0] if words else "")
        return Command(env, ranks, word, target, tuple(words), template)
    if word == "apt-get":  # Debian packages a page tells the reader to install
        return Command(env, ranks, "apt-get", words[0] if words else "", tuple(words[1:]),
                       template)
    raise AssertionError(f"{text!r}: no rule for {word!r}")


def _options(args: Tuple[str, ...]) -> List[str]:
    """The option names among args (``--x=1`` gives ``--x``; negative numbers are not
    options)."""
    words = [a.strip("[]") for a in args]  # [--tau 4]: an optional part of a template
    return [a.split("=", 1)[0] for a in words
            if a.startswith("-") and not re.match(r"^-\d", a) and a != "-"]


# ------------------------------------------------------------------ checking a command


@functools.lru_cache(maxsize=None)
def _parser():
    return build_parser()


def _parse_braidpy(args: Tuple[str, ...]) -> Optional[str]:
    """None if argparse takes args, else its error message."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            _parser().parse_args(list(args))
        except SystemExit as exc:
            if exc.code == 0:  # --help, --version
                return None
            return " ".join(err.getvalue().split()) or f"exit {exc.code}"
    return None


def _braidpy_options(command: str) -> List[str]:
    """The options ``braidpy [command] --help`` shows (hidden earlier spellings such as
    ``--tol`` and ``--T`` still parse, but a page shows the current ones)."""
    parser = _parser()
    actions = parser._actions + (_subparsers(parser).choices[command]._actions
                                 if command else [])
    return [o for a in actions if a.help != argparse.SUPPRESS for o in a.option_strings]


def _abbreviated(args: Tuple[str, ...]) -> Optional[str]:
    """argparse takes ``--validation-frac`` for ``--validation-fraction``, and hidden
    earlier spellings; a page spells out the options --help shows."""
    subcommand = next((a for a in args if not a.startswith("-")), "")
    taken = _braidpy_options(subcommand if subcommand in _braidpy_commands() else "")
    other = [o for o in _options(args) if o not in taken]
    return f"braidpy {subcommand}: {', '.join(other)} is not an option --help shows " \
           f"(an abbreviation or a hidden earlier spelling)" if other else None


def _braidpy_commands() -> Tuple[str, ...]:
    return tuple(_subparsers(_parser()).choices)


@functools.lru_cache(maxsize=None)
def script_options(path: str) -> Tuple[str, ...]:
    """The options ``python PATH --help`` names."""
    proc = subprocess.run([sys.executable, str(ROOT / path), "--help"], capture_output=True,
                          text=True, timeout=60, env=ENV, cwd=ROOT)
    assert proc.returncode == 0 and "usage:" in proc.stdout, (
        f"python {path} --help: status {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return tuple(set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout)))


def _extras() -> set:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


def check(shown: Shown) -> Optional[str]:
    """Why the command is wrong (None: it is right as far as reading it goes). Returns
    "reference" for a span that names a command without being one."""
    command = read_command(shown.text)
    if command.program == "":
        return "reference" if shown.inline else "no program after mpiexec"
    if command.program == "braidpy":
        args = command.args
        if shown.text in REFUSED:
            error = _parse_braidpy(args) or "taken"
            return None if REFUSED[shown.text] in error else (
                f"the page says argparse refuses it with {REFUSED[shown.text]!r}: {error}")
        if not command.template:
            error = _parse_braidpy(args)
            if error is None:
                return _abbreviated(args)
            missing = ("the following arguments are required" in error
                       or "expected one argument" in error)
            if not (shown.inline and missing):
                return f"argparse: {error}"
        subcommand = next((a for a in args if not a.startswith("-")), "")
        if subcommand and subcommand not in _braidpy_commands() and subcommand != "...":
            return f"no braidpy command {subcommand!r}"
        taken = _braidpy_options(subcommand if subcommand in _braidpy_commands() else "")
        unknown = [o for o in _options(args) if o not in taken]
        return f"braidpy {subcommand}: no option {', '.join(unknown)}" if unknown else (
            "reference" if not command.template else None)
    if command.program == "script":
        path = command.target
        if not (ROOT / path).is_file():
            return None if path in PAGE_FILES else f"no file {path}"
        options = _options(command.args)
        if options and path.split("/")[0] in SCRIPT_FOLDERS + ("tools",):
            unknown = [o for o in options if o not in script_options(path)]
            if unknown:
                return f"python {path} --help names no {', '.join(unknown)}"
        return None
    if command.program == "module":
        if command.target.split(".")[0] == "braidpy" and \
                importlib.util.find_spec(command.target) is None:
            return f"no module {command.target}"
        return None
    if command.program == "pip":
        named = set()
        for word in command.args:
            m = re.match(r"^(\.|braidpy[-_]mgrit|.*\.whl)\[([\w,-]+)\]$", word)
            if m:
                named.update(m.group(2).split(","))
        unknown = sorted(named - _extras())
        return f"pip: no extra {', '.join(unknown)} in pyproject.toml" if unknown else None
    if command.program == "bash":
        return None if (ROOT / command.target).is_file() else f"no file {command.target}"
    if command.program == "apt-get":
        return None if command.target == "install" and command.args else \
            f"apt-get {command.target}: pages show only package installs"
    raise AssertionError(command)


#: Commands a page shows being refused by argparse, and the words of the refusal.
REFUSED = {
    "braidpy plan -P 1000000000000":  # docs/errors.md: the option and the limit
        "argument -P/--procs: expected an int <= 2147483647",
}


def complete_commands() -> Dict[str, List[str]]:
    """Text -> where it is shown, for every complete command (not templates, references
    or commands shown being refused)."""
    found: Dict[str, List[str]] = {}
    for shown in shown_commands():
        if read_command(shown.text).template or shown.text in REFUSED \
                or check(shown) == "reference":
            continue
        found.setdefault(shown.text, []).append(shown.where)
    return found


# ------------------------------------------------------------------ what is not run

#: Kinds of command never run here, and why (matched by the start of the text).
NEVER_RUN = {
    "pip ": "changes (or lists) the environment the tests run in; the extras it names are "
            "checked above, and tests/test_wheels.py installs the package in a fresh one",
    "BRAIDPY_CUDA=": "an install with the CUDA build switch (as pip above)",
    "python -m pytest": "the test suite itself",
    "BRAIDPY_CUDNN_LIBRARY=": "runs tests/test_cudnn.py against a downloaded cuDNN",
    "python -m sphinx": "the docs build: tests/test_docs.py runs it",
    "python -m build": "builds an sdist: tests/test_packaging.py does",
    "apt-get install": "installs system packages (as root); test_extras.py checks that CI "
                       "runs the README's install steps",
    "PETSC_CONFIGURE_OPTIONS=": "builds PETSc and petsc4py from source (an install, as pip "
                                "above; minutes)",
    "PETSC_DIR=": "installs petsc4py on a PETSc of the reader's own (an install, as pip above)",
}

BENCHMARK = ("a benchmark: it measures for minutes, and its figures are dated records of "
             "a machine, not claims a test can repeat")

#: Complete commands that are not run, and why (the text exactly as the pages show it).
NOT_RUN = {
    # README.md, docs/install.md
    "python tools/build_wheels.py --out /tmp/wheels":
        "builds manylinux wheels for five Pythons (many minutes); tests/test_wheels.py",
    "python tools/build_wheels.py --out /tmp/wheels --python 3.12 --variant cpu":
        "builds a wheel (minutes); tests/test_wheels.py",
    "python setup.py build_ext --inplace":
        "rebuilds the compiled core in place, under every other test's feet",
    # docs/petsc.md
    "python examples/ex11_petsc_heat2d.py":
        "tests/test_petsc.py runs the example serially (it needs petsc4py)",
    "mpiexec -n 4 python examples/ex11_petsc_heat2d.py --space 2 --stepper ts":
        "tests/test_petsc.py runs the example on 2 x 2 space x time ranks (it needs "
        "petsc4py)",
    # docs/training.md
    "mpiexec -n 4 braidpy train peaks --layers 256 --mode exact --abs-tol 1e-8":
        "100 exact-gradient steps of 256 layers (minutes on 2 cores); "
        "tests/test_cli.py::test_two_ranks_log_the_same_losses_as_one runs exact mode "
        "under mpiexec on a small network",
    "mpiexec -n 2 braidpy train peaks --m1 1 --m2 2 --relax F":
        "100 one-shot steps on 5000 points at 2 ranks (about a minute here); the options' "
        "way into the config: tests/test_cli.py::test_relax_and_per_level_cf_parse_into_"
        "the_config",
    "mpiexec -n 2 braidpy train peaks --relax F --cf 8,4 --levels 3":
        "as the line above it",
    "python benchmarks/bench_work_ratio.py --steps 10 --repeats 2": BENCHMARK,
    "python benchmarks/bench_work_ratio.py --samples 5000 --steps 10 --repeats 2 --settings "
    "serial os12-F": BENCHMARK,
    "mpiexec -n 4 braidpy train peaks --m1 1 --m2 2 --relax F --quality-check-every 10":
        "100 one-shot steps on 5000 points at 4 ranks (minutes on 2 cores); the checks on "
        "the command line: tests/test_train_quality.py::test_command_line_checks_and_"
        "shows_the_cosine, at 1, 2, 4 ranks: tests/train_cases.py",
    "braidpy train peaks --layers 128 --plot out/training.png --log out/log.jsonl":
        "100 steps of 128 layers (about 12 s here); --plot and --log run in the session "
        "of docs/training.md's examples",
    "braidpy train digits --preset paper":
        "the paper-scale setup: about 15 s per step for 100 steps",
    "braidpy train mnist --data ~/mnist --validation-samples 1000":
        "needs MNIST's IDX files, which braidpy never downloads; tests/test_cli_mnist.py "
        "trains on a small IDX folder",
    "braidpy evaluate mnist.ckpt mnist --data ~/mnist":
        "needs MNIST's files and a checkpoint trained on them (above)",
    "braidpy train digits28":
        "40 conv steps at MNIST's size: minutes on 2 cores; tests/test_cli_mnist.py",
    "braidpy train digits28 --iterations 60 --validate-every 20":
        "as braidpy train digits28, 60 steps (400 s measured)",
    # docs/parallel.md
    "mpiexec -n 2 braidpy train digits --grid 1,2,1":
        "40 steps with a halo exchange at every layer call, about 20 s at 2 ranks on 2 "
        "cores; tests/test_cli_grid.py trains digits on --grid 1,2,1 in fewer steps",
    "mpiexec -n 2 braidpy train digits --grid 2,1,1 --optimizer easgd --rho 1 --tau 2":
        "runs verbatim (with a log) in tests/test_easgd_training.py::test_the_documented_"
        "easgd_command_learns_digits",
    "mpiexec -n 4 braidpy train digits --grid 2,1,2 --optimizer easgd --momentum 0.9":
        "as the command above it at 4 ranks (about 11 s here); sync EASGD on the grid "
        "2,1,2: tests/test_easgd_training.py",
    "mpiexec -n 4 python benchmarks/bench_easgd.py": "a benchmark: 200 steps per method",
    "mpiexec -n 4 python benchmarks/bench_easgd.py --methods sync-easgd --tau 4":
        "a benchmark (as above)",
    "mpiexec -n 2 python benchmarks/bench_grids.py --problems digits --repeats 3":
        "a benchmark (minutes)",
    "python benchmarks/bench_solver.py problems": BENCHMARK,
    "python benchmarks/bench_perf.py grids --problems digits28": BENCHMARK,
    "python benchmarks/bench_perf.py grids --problems digits --ranks 1 2": BENCHMARK,
    "python benchmarks/bench_perf.py grids --ranks 1 2": BENCHMARK,
    "python benchmarks/bench_perf.py grids --ranks 1 2 4": BENCHMARK,
    "python benchmarks/bench_perf.py model --ranks 1 2": BENCHMARK,
    "python benchmarks/bench_perf.py model --ranks 1": BENCHMARK,
    "python benchmarks/bench_work_ratio.py --settings serial os12-F": BENCHMARK,
    "python benchmarks/bench_work_ratio.py --settings serial os12-F os12-F-L3-cf8": BENCHMARK,
    "python benchmarks/bench_work_ratio.py --layers 1024 --samples 5000 --steps 20 "
    "--repeats 1 --settings serial os12-F-L3-cf8 os12-F": BENCHMARK,
    "python benchmarks/bench_perf.py model --ranks 1 2 4 8": BENCHMARK,
    "python benchmarks/bench_perf.py model": BENCHMARK,
    "python benchmarks/bench_perf.py grids": BENCHMARK,
    "python benchmarks/bench_perf.py timeline": BENCHMARK,
    # docs/performance.md, and its dated runs in docs/benchmarks.md
    "braidpy calibrate -o cal.json":
        "about a minute of measurements; the sessions below calibrate a few points "
        "instead, and tests/test_cli_perf.py runs calibrate",
    "mpiexec -n 2 braidpy calibrate -o cal.json": "as braidpy calibrate -o cal.json",
    "braidpy plan --calibration cal.json --network conv:8x28x28:1024 --batch 500 -P 128 "
    "--memory 4 --mode exact --m1 6 --m2 6":
        "1024 conv layers: ranking its 386 strategies takes about a minute",
    "python benchmarks/bench_perf.py model --ranks 1 2 4 --json run1.json":
        "a benchmark (about a minute)",
    "python benchmarks/bench_perf.py model --from-json run*.json --plot perf_validation.png":
        "reads the benchmark's runs (above)",
    "python benchmarks/bench_perf.py grids --ranks 1 2 4 --json grids.json":
        "a benchmark (about 1.5 minutes)",
    "python benchmarks/bench_perf.py grids --from-json grids.json --plot perf_grids.png":
        "reads the benchmark's runs (above)",
    "python benchmarks/bench_work_ratio.py": "a benchmark: 3 x 100 steps of 256 layers",
    "python benchmarks/bench_work_ratio.py --samples 5000 --steps 10 --repeats 2 --settings "
    "serial os2-FCF os12-F": "a benchmark: 2 x 10 steps of 256 layers at 5000 samples",
    "python benchmarks/bench_work_ratio.py --settings serial os12-F os2-FCF os1-F --steps 20":
        "a benchmark: 4 settings x 3 runs x 20 steps of 256 layers (minutes)",
    "python benchmarks/bench_work_ratio.py --settings serial os12-F os2-FCF --repeats 2":
        "a benchmark: 3 settings x 2 runs x 10 or 20 steps of 256 layers (minutes)",
    "python benchmarks/bench_batched.py --batches 1": "a benchmark (4096 layers)",
    "python benchmarks/bench_batched.py --batches 1 --tables gradient":
        "a benchmark (4096 layers)",
    # docs/benchmarks.md, docs/batching.md, docs/torch.md, docs/architecture.md, gpu.md
    "python benchmarks/bench_overhead.py": "a benchmark",
    "python benchmarks/bench_vs_pymgrit.py --repeats 5":
        "a benchmark; needs PyMGRIT's venv (benchmarks/setup_pymgrit_env.sh)",
    # docs/benchmarks.md (the regression checks of the out-of-place steps)
    "python benchmarks/bench_vs_pymgrit.py --repeats 3":
        "a benchmark; needs PyMGRIT's venv (benchmarks/setup_pymgrit_env.sh)",
    "python benchmarks/bench_overhead.py --tables serial": "a benchmark",
    "python benchmarks/bench_batched.py --repeats 5 --batches 1 --tables overhead forward "
    "gradient": "a benchmark (4096 layers)",
    "python benchmarks/bench_batched.py --repeats 3 --batches 1 --tables forward gradient":
        "a benchmark (4096 layers)",
    "python benchmarks/bench_adjoint.py": "a benchmark",
    "python benchmarks/bench_peaks.py --iterations 250": "a benchmark: 250 training steps",
    "python benchmarks/bench_depth.py --batch 500": "a benchmark: up to 2048 layers",
    "OMP_NUM_THREADS=1 python benchmarks/bench_solver.py delta":
        "a benchmark: Lorenz to 100 iterations and two Kuramoto-Sivashinsky solves (minutes); "
        "its short Lorenz check runs in the session 'docs/benchmarks.md: Delta correction'",
    "braidpy train digits --layers 8 --width 8 --lr 0.01 --mode oneshot --batch 100 "
    "--shuffle --optimizer adam --iterations 400 --validate-every 25":
        "400 one-shot conv steps on one rank (about a minute)",
    "python benchmarks/bench_torch.py --repeats 5": "a benchmark (torch)",
    "python benchmarks/bench_torch.py": "a benchmark (torch)",
    "python benchmarks/bench_torch.py --torchbraid --check":
        "needs torchbraid's venv (benchmarks/setup_torchbraid_env.sh)",
    "python benchmarks/bench_kernels.py --tables calls": "a benchmark",
    "python benchmarks/bench_kernels.py --tables fused": "a benchmark",
    "python benchmarks/bench_solver.py heat --repeats 3": "a benchmark (16384 steps)",
    "python benchmarks/bench_gpu.py": "a GPU",
    "python benchmarks/bench_gpu.py --conv": "a GPU",
    "python benchmarks/bench_gpu.py --dense-fused": "a GPU",
    "python benchmarks/bench_gpu.py --validation": "a GPU",
    "python benchmarks/bench_gpu.py --conv-net": "a GPU",
    "python benchmarks/bench_gpu.py --overheads": "a GPU",
    "python benchmarks/bench_torch.py --device cuda": "a GPU",
    "braidpy train digits --device cuda --iterations 20": "a GPU",
    "bash benchmarks/gpu_check.sh": "a GPU (about 5 minutes of GPU steps)",
}


# ------------------------------------------------------------------ what runs


@dataclass(frozen=True)
class Run:
    """What a page says a command does."""

    #: (what a page says, what the run prints because of it): the first must be on a
    #: page (spaces collapsed), the second in the output
    says: Tuple[Tuple[str, str], ...] = ()
    prints: Tuple[str, ...] = ()  # further lines of its output (stdout and stderr)
    matches: Tuple[str, ...] = ()  # regular expressions its output matches
    status: int = 0
    writes: Tuple[str, ...] = ()  # files, in the scratch folder
    same_with: Tuple[int, ...] = ()  # rank counts that print the same `prints`
    shown_lines: Tuple[int, ...] = ()  # lines of the output the page shows, verbatim
    #: (what a page says, a regular expression with one number group in the output, the
    #: page's value, the tolerance the page states): figures that depend on the CPU's BLAS
    #: kernels, checked within what the page says they may move
    near: Tuple[Tuple[str, str, float, float], ...] = ()
    outputs: Dict[str, str] = field(default_factory=dict)  # repository path -> scratch
    then: Optional[Callable[[Path, str], None]] = None  # a further check


def _readme_quick_start() -> Tuple[str, str]:
    """The README's quick start program and the line it prints."""
    text = (ROOT / "README.md").read_text()
    program = re.search(r"```python\n(.*?class Decay.*?)```", text, re.S).group(1)
    printed = re.search(r"```text\n(.*?)\n```", text[text.index(program):], re.S).group(1)
    return program, printed


def _quick_start_under_mpi(folder: Path) -> None:
    """script.py: the README's quick start with the communicator it says to pass."""
    program, _ = _readme_quick_start()
    call = re.search(r"braidpy\.solve\((.*?)\)\n", program, re.S)
    assert call, program
    program = program.replace(call.group(0), call.group(0)[:-2]
                              + ", comm=braidpy.parallel.world())\n")
    (folder / "script.py").write_text(program)


def _every_rank_prints_the_quick_start_line(folder: Path, output: str) -> None:
    # mpiexec interleaves the ranks' output in pieces: compare the characters.
    _, printed = _readme_quick_start()
    assert sorted("".join(output.split())) == sorted("".join(printed.split()) * 4), output


def _peaks_features(folder: Path) -> None:
    """X.npy and y.csv as a reader brings them: 300 Peaks points, their class ids."""
    from braidpy import data

    X, C = data.peaks(300, seed=20261204)
    np.save(folder / "X.npy", X)
    np.savetxt(folder / "y.csv", C.argmax(axis=1), fmt="%d")


def _class_ids_of_every_sample(folder: Path, output: str) -> None:
    ids = np.loadtxt(folder / "classes.csv", dtype=np.int64)
    assert ids.shape == (300,) and set(ids) <= set(range(5)), ids


def _a_calibration(folder: Path) -> None:
    """cal.json: a short calibration of the layers the commands use (a full one, as the
    page runs it, takes a minute)."""
    proc = subprocess.run(
        [sys.executable, "-m", "braidpy", "calibrate", "-o", "cal.json", "--layer",
         "dense:8", "--layer", "conv:4x8x8:3", "--samples", "16", "64", "--rows", "1",
         "--repeats", "1", "-q"], capture_output=True, text=True, timeout=120, env=ENV,
        cwd=folder)
    assert proc.returncode == 0, proc.stderr


def _keep_the_output(name: str) -> Callable[[Path, str], None]:
    """Saves a run's output in the scratch folder, for a later command to compare with."""
    def keep(folder: Path, output: str) -> None:
        (folder / name).write_text(output)
    return keep


def _ends_like(name: str, *starts: str) -> Callable[[Path, str], None]:
    """The run prints the same lines starting with ``starts`` as the run kept in ``name``
    (on one machine a resumed run repeats the uninterrupted one exactly)."""
    def check(folder: Path, output: str) -> None:
        first = (folder / name).read_text().splitlines()
        for start in starts:
            want = [line for line in first if line.startswith(start)]
            got = [line for line in output.splitlines() if line.startswith(start)]
            assert want and got == want, (start, want, got)
    return check


def _the_captions_residuals(folder: Path, output: str) -> None:
    """The README's caption: to 1e-8, and the same residuals on 1 and 4 ranks."""
    one = _run("python examples/ex02_heat1d.py", folder, Run())
    history = lambda text: re.findall(r"\|\| r_\d+ \|\| = (\S+)", text)  # noqa: E731
    assert history(output) and history(output) == history(one), (output, one)
    assert float(history(output)[-1]) < 1e-8, output


#: What the README's caption and docs/training.md say of two runs.
CAPTION = ("1024 implicit Euler steps of the 1D heat equation, 3 levels, 7 MGRIT iterations "
           "to 1e-8; the same residuals on 1 and 4 ranks")
PEAKS = "91.00 % (step 96 of 100; final training loss 0.2748)"
#: The tolerances docs/training.md states for those figures on other CPUs' BLAS kernels.
PEAKS_SPREAD = "within 1.5 points of accuracy and 1 % of the loss"


#: Sessions: one scratch folder each, prepared by the first item, then the commands in
#: the order of their pages, with what the pages say they do.
SESSIONS: Dict[str, Tuple[Optional[Callable[[Path], None]], Dict[str, Run]]] = {
    "README: the main demo": (None, {
        "mpiexec -n 4 braidpy train peaks --iterations 60 --samples 1000": Run(
            says=(("`best validation accuracy: 84.50% (step 60)`, the same with `-n 2`",
                   "best validation accuracy: 84.50% (step 60)"),), same_with=(2,)),
    }),
    "README: the figure, quick start under MPI": (_quick_start_under_mpi, {
        "mpiexec -n 4 python examples/ex02_heat1d.py --plot-residuals "
        "docs/images/heat1d_residuals.png": Run(
            says=((CAPTION, "1024 implicit Euler steps"), (CAPTION, "hierarchy: 3 levels"),
                  (CAPTION, "iterations: 7")),
            outputs={"docs/images/heat1d_residuals.png": "heat1d_residuals.png"},
            writes=("heat1d_residuals.png",), then=_the_captions_residuals),
        "mpiexec -n 4 python script.py": Run(then=_every_rank_prints_the_quick_start_line),
        "mpiexec -n 4 python examples/ex01_scalar_ode.py": Run(
            prints=("4096 backward Euler steps, 4 MPI rank(s)",)),
        "mpiexec -n 4 python examples/ex02_heat1d.py --plot-solution heat.png": Run(
            prints=("4 MPI rank(s)", "wrote heat.png"), writes=("heat.png",)),
        "mpiexec -n 4 python examples/ex02_heat1d.py": Run(prints=("4 MPI rank(s)",)),
    }),
    "docs/training.md: examples": (_peaks_features, {
        "braidpy train peaks": Run(
            near=((PEAKS_SPREAD, r"best validation accuracy: (\S+)%", 91.00, 1.5),
                  (PEAKS_SPREAD, r"final training loss: (\S+)", 0.2748, 0.01 * 0.2748)),
            then=_keep_the_output("first run.txt"),
            says=(("the defaults on one process (where the mode `auto` runs serial "
                   "backpropagation)", "mode serial, 1 rank(s)"),)),
        "braidpy train peaks --data tests/data/peaks --plot peaks.png --log peaks.jsonl":
            Run(prints=("5000 training / 200 validation samples",),
                writes=("peaks.png", "peaks.jsonl")),
        "braidpy train peaks --checkpoint run.ckpt --iterations 50": Run(
            prints=("stopped after 50 steps",), writes=("run.ckpt",)),
        "braidpy train peaks --checkpoint run.ckpt --iterations 100 --resume": Run(
            says=(("the run checkpointed at step 50 and resumed (the fourth and fifth "
                   "lines) ends with exactly the same lines",
                   "resumed from run.ckpt at step 50"),),
            then=_ends_like("first run.txt", "best validation accuracy:",
                            "final training loss:")),
        "braidpy train peaks --checkpoint run.ckpt --iterations 200 --resume": Run(
            prints=("resumed from run.ckpt at step 100", "stopped after 200 steps")),
        "braidpy train digits": Run(says=((
            "reaches **97.2%** (step 40)", "best validation accuracy: 97.21% (step 40)"),)),
        "braidpy evaluate run.ckpt peaks": Run(matches=(  # the checkpoint of step 200
            r"validation \(200 samples\), last weights of step 200: accuracy \d+\.\d\d%",)),
        "braidpy predict run.ckpt X.npy -o classes.csv": Run(
            prints=("wrote class ids of 300 samples to classes.csv",),
            then=_class_ids_of_every_sample),
        "braidpy train X.npy --labels y.csv --opening zero-pad --width 16 "
        "--validation-fraction 0.1": Run(prints=(
            "X.npy with labels y.csv, 270 training / 30 validation samples",
            "zero-pad opening")),
        "braidpy train X.npy --labels y.csv --validation-fraction 0.1 --opening replicate":
            Run(prints=("270 training / 30 validation samples", "replicate opening")),
        "braidpy train --help": Run(says=((
            "`braidpy train --help-all` lists every option", "--help-all"),)),
        "braidpy train --help-all": Run(prints=("--relax", "--tikhonov", "--rho")),
    }),
    "docs/parallel.md: process grids": (None, {
        "mpiexec -n 4 braidpy train digits --grid 2,1,2": Run(
            says=(("# 2 data groups x 2 layer ranks", "grid data 2 x space 1 x layers 2"),),
            prints=("stopped after 40 steps",)),
        "mpiexec -n 3 braidpy train digits --grid 3,1,1 --optimizer easgd-async": Run(
            prints=("grid data 3 x space 1 x layers 1", "stopped after 40 steps")),
    }),
    "docs/performance.md: plan and --grid auto": (_a_calibration, {
        "braidpy plan --calibration cal.json --network peaks -P 64 --interconnect "
        "infiniband-100g": Run(prints=(
            "network: infiniband-100g",
            "note: network costs assumed (assumed: 100 Gb/s InfiniBand, 1.5 us)")),
        "braidpy calibrate --help": Run(prints=("usage: braidpy calibrate",)),
        "braidpy plan --help": Run(prints=("usage: braidpy plan",)),
        "braidpy plan --calibration cal.json --network peaks-1024 --batch 8 -P 64 "
        "--interconnect infiniband-100g --top 2": Run(
            shown_lines=(0, 1, -1), matches=(r"\n   2  \d+x\d+x\d+ .*\n(note: .*\n)*\d+ "
                                          r"strategies ranked",)),
        "mpiexec -n 4 braidpy train digits --grid auto --calibration cal.json -v": Run(
            says=(("# braidpy.cli: --grid auto chose", "braidpy.cli: --grid auto chose"),),
            matches=(r"--grid auto chose \d+,\d+,\d+: predicted \S+ ms per gradient, "
                     r"\S+x one process",)),
        "braidpy train peaks --preset paper --layers 256 --samples 5000 --iterations 3 "
        "--validate-every 0": Run(prints=("256 x dense 8", "stopped after 3 steps")),
        "python benchmarks/bench_perf.py timeline --ranks 1 2 --samples 64 --repeats 10":
            Run(),
        "mpiexec -n 2 python benchmarks/bench_mpi_progress.py": Run(),
    }),
    "docs/benchmarks.md: Delta correction": (None, {
        "python benchmarks/bench_solver.py delta --lyapunov-times 4 --ks-rank 0": Run(
            says=(("| 4 | 2048 | 39 | 14 | 0.36 |", "largest ratio 0.36 (goal <= 0.50): met"),),
            matches=(r"\n4 +2048 +39 +14 +0\.36 ",)),
    }),
    "docs/errors.md: sizes refused at once": (None, {
        "braidpy train peaks --layers 1000000000": Run(status=2, says=(
            ("usage error (status 2) at once, naming `--layers … --width …`",
             "--layers 1000000000"),
            ("usage error (status 2) at once, naming `--layers … --width …`", "--width 8"))),
    }),
}


def _argv(command: Command, text: str, folder: Path, run: Run) -> List[str]:
    args = []
    for word in command.args:
        if word in run.outputs:
            word = run.outputs[word]
        elif not word.startswith("-") and (ROOT / word).exists():
            word = str(ROOT / word)  # an input of this repository
        args.append(word)
    if command.program == "braidpy":
        argv = [sys.executable, "-m", "braidpy", *args]
    elif command.program == "script":
        script = ROOT / command.target
        argv = [sys.executable, str(script if script.is_file() else folder / command.target),
                *args]
    else:
        raise AssertionError(f"{text!r}: running {command.program} has no rule")
    if command.ranks is not None:
        argv = [MPIEXEC, "-n", str(command.ranks), *argv]
    return argv


def _run(text: str, folder: Path, run: Run, ranks: Optional[int] = None) -> str:
    command = read_command(text)
    if ranks is not None:
        command = Command(command.env, ranks, command.program, command.target, command.args,
                          command.template)
    argv = _argv(command, text, folder, run)
    proc = run_mpi(argv, timeout=240, env=dict(ENV, **command.env), cwd=folder)
    output = proc.stdout + proc.stderr
    assert proc.returncode == run.status, (
        f"{text}: status {proc.returncode}, the page implies {run.status}\n{output}")
    return output


# ------------------------------------------------------------------ the tests


def test_the_finder_sees_every_kind_of_place():
    """One command of each kind of place, as the rules above read it (a guard on the
    finder: each was there when the rules were written)."""
    found = {(s.where.split(":")[0], s.text, s.inline, bool(s.output))
             for s in shown_commands()}
    for place in [
        ("README.md", "mpiexec -n 4 braidpy train peaks --iterations 60 --samples 1000",
         False, False),  # a bash block, after pip ... &&
        ("docs/training.md", "braidpy evaluate run.ckpt peaks", False, False),  # comment cut
        ("docs/parallel.md", "mpiexec -n 4 braidpy train digits --grid 2,1,2", False,
         False),  # an unmarked block, its description cut
        ("docs/performance.md", "braidpy plan --calibration cal.json --network peaks-1024 "
         "--batch 8 -P 64 --interconnect infiniband-100g --top 2", False, True),  # text, $
        ("docs/performance.md", "braidpy calibrate --help", True, False),  # prose
        ("docs/benchmarks.md", "python benchmarks/bench_batched.py --repeats 3 --batches 1 "
         "--tables forward gradient", True, False),  # a script named without its folder
        ("braidpy train --help-all", "braidpy predict run.ckpt X.npy -o classes.csv", False,
         False),  # the train epilog
        ("braidpy evaluate --help", "braidpy train --checkpoint", True, False),  # help span
    ]:
        assert place in found, place


@pytest.mark.parametrize("shown", shown_commands(), ids=lambda s: f"{s.where} {s.text}")
def test_every_shown_command_reads_right(shown):
    problem = check(shown)
    assert problem in (None, "reference"), f"{shown.where}: {shown.text}\n{problem}"


def test_every_complete_command_is_run_or_listed_with_a_reason():
    shown = complete_commands()
    ran = {text for _, commands in SESSIONS.values() for text in commands}
    never = {text for text in shown if any(text.startswith(k) for k in NEVER_RUN)}
    new = {text: where for text, where in shown.items()
           if text not in ran and text not in NOT_RUN and text not in never}
    texts = {s.text for s in shown_commands()}
    stale = sorted(t for t in list(NOT_RUN) + sorted(ran) if t not in shown)
    stale += [t for t in REFUSED if t not in texts]
    assert not new and not stale, (
        "".join(f"shown, but no session runs it and NOT_RUN does not list it (run it, or "
                f"list it with the reason): {w[0]}: {t}\n" for t, w in sorted(new.items()))
        + "".join(f"listed, but no page shows it any more: {t}\n" for t in stale))
    assert not set(NOT_RUN) & ran, set(NOT_RUN) & ran
    unused = [k for k in NEVER_RUN if not any(t.startswith(k) for t in shown)]
    assert not unused, f"NEVER_RUN rules that no command matches: {unused}"


def _shown_output(text: str) -> Tuple[str, ...]:
    return next(s.output for s in shown_commands() if s.text == text and s.output)


@pytest.mark.parametrize("name", list(SESSIONS))
def test_documented_commands_run_as_the_pages_say(name, tmp_path):
    prepare, commands = SESSIONS[name]
    for said in {said for run in commands.values()
                 for said in [s for s, _ in run.says] + [n[0] for n in run.near]}:
        assert said in PAGE_TEXT, f"no page says {said!r} any more: update {name!r}"
    if prepare is not None:
        prepare(tmp_path)
    for text, run in commands.items():
        output = _run(text, tmp_path, run)
        expected = run.prints + tuple(printed for _, printed in run.says)
        for line in expected:
            assert line in output, f"{text}: no {line!r} in its output\n{output}"
        for pattern in run.matches:
            assert re.search(pattern, output), f"{text}: no /{pattern}/ in\n{output}"
        for _, pattern, value, tolerance in run.near:
            found = re.search(pattern, output)
            assert found, f"{text}: no /{pattern}/ in\n{output}"
            assert abs(float(found.group(1)) - value) <= tolerance, (
                f"{text}: {found.group(0)!r}, the page says {value} within {tolerance}")
        shown = _shown_output(text) if run.shown_lines else ()
        for index in run.shown_lines:
            assert shown[index] in output.splitlines(), (
                f"{text}: the page shows {shown[index]!r}; it printed\n{output}")
        for written in run.writes:
            assert (tmp_path / written).is_file() and (tmp_path / written).stat().st_size, \
                f"{text}: wrote no {written}"
        if run.then is not None:
            run.then(tmp_path, output)
        for ranks in run.same_with:
            again = _run(text, tmp_path, run, ranks=ranks)
            for line in expected:
                assert line in again, f"{text} on {ranks} ranks: no {line!r}\n{again}"
