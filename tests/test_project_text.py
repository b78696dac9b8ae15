"""The project speaks of itself: no work-tracking text in the repository.

The code, tests, docs and benchmarks describe braidpy to its users. Internal work
tracking (numbered issues and work sessions, who built something, whether a machine was
lent to a session, a development journal, papers cited by an internal index number) has
no place there: a change is described by what it does and why, a measurement by its date
and host, a paper by its authors, title, venue and year, and release history is
CHANGELOG.md in the Keep a Changelog format.

Every text file of the checkout is read (``git ls-files``: tracked files and new ones git
does not ignore; without git, a walk that skips build outputs, caches and virtual
environments), and every line is matched against ``PATTERNS``. This file is left out:
it has to spell the phrases it looks for.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

#: Work-tracking phrases, each with what to write instead. Case-insensitive.
PATTERNS: List[Tuple[str, str]] = [
    (r"\bissues? ?#?\d+", "a numbered issue: name the feature or the fault"),
    (r"\bsessions? ?#?\d+", "a numbered work session: give the date"),
    (r"\bsession by session\b", "a work log: say what changed (CHANGELOG.md)"),
    (r"\b(?:this|that|earlier|previous|later|other) (?:work )?sessions?(?:'s?)?\b(?!\(\))",
     "a work session: give the date or the commit"),
    (r"\bthe session's (?:start|end)\b", "a work session: name the commit"),
    (r"\bhelper[- ]built\b", "who built it: say what it is"),
    (r"\bbuilt by (?:a |the )?helpers?\b", "who built it: say what it is"),
    (r"\b(?:was|were|is|are|not|be|been|being) lent\b", "a machine lent: say what has run where"),
    (r"\blent (?:GPU|device|machine|host|16-core)", "a machine lent: name the host"),
    (r"\b(?:no|a) (?:device|machine|GPU) (?:was )?lent\b", "a machine lent: say what has run"),
    (r"\bdevice (?:call|budget) ?\d*\b", "a loan of a machine: say which run"),
    (r"\bwork periods?\b", "a work period: give the date"),
    (r"\bdefects? \d+\b", "a numbered defect: name the fault"),
    (r"\bitems? \d+(?:'s)?\b(?=[)'’:;,. ]|$)", "an issue's item: name the feature"),
    (r"\bjournal\.md\b", "the development journal is gone: CHANGELOG.md or the facts"),
    (r"\bdevelopment journal\b", "the development journal is gone: CHANGELOG.md"),
    (r"\bpapers? ?#?0\d{2}\b", "a paper by an internal number: cite authors, title, venue and "
     "year (Günther et al. 2020)"),
    (r"\bseed[- ]papers?\b", "an internal name for the papers: cite them by authors and year"),
    (r"\bseed ?#?0\d{2}\b", "a paper by an internal number: cite authors, title, venue and year"),
    (r"\bpapers/0\d{2}", "a path into an internal paper index: cite the paper"),
]
COMPILED = [(re.compile(p, re.IGNORECASE), why) for p, why in PATTERNS]

#: Folders a walk without git skips (build outputs, caches, environments).
SKIP_DIRS = {".git", "build", "dist", "_build", "__pycache__", ".pytest_cache",
             ".mypy_cache", ".ruff_cache", ".tox", ".nox", ".venv", "venv", "env",
             "node_modules", ".eggs", ".whl", "wheelhouse"}
#: Files larger than this are data, not prose.
MAX_BYTES = 2_000_000


def _listed_files() -> List[Path]:
    git = shutil.which("git")
    if git and (ROOT / ".git").exists():
        out = subprocess.run([git, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True,
                             check=True).stdout
        return [ROOT / name for name in sorted(set(out.decode().split("\0"))) if name]
    found = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        found += [Path(top) / f for f in sorted(files)]
    return found


def _text_lines(path: Path) -> Iterator[Tuple[int, str]]:
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return
        data = path.read_bytes()
    except OSError:
        return
    if b"\0" in data[:8192]:
        return  # binary
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    yield from enumerate(text.splitlines(), start=1)


def find_tracking_text(lines) -> List[Tuple[int, str, str]]:
    """(line number, matched text, what to write instead) of every hit in ``lines``."""
    hits = []
    for number, line in lines:
        for pattern, why in COMPILED:
            for match in pattern.finditer(line):
                hits.append((number, match.group(0), why))
    return hits


def test_no_work_tracking_text_in_the_repository():
    files = [p for p in _listed_files() if p.resolve() != THIS]
    assert len(files) > 50, f"only {len(files)} files found under {ROOT}"
    found = []
    for path in files:
        for number, text, why in find_tracking_text(_text_lines(path)):
            found.append(f"{path.relative_to(ROOT)}:{number}: {text!r} ({why})")
    assert not found, ("work-tracking text in the project (describe the product: the "
                       "feature, the reason, the date and host):\n" + "\n".join(found))


@pytest.mark.parametrize("line", [
    # the numbered samples are split in two, so that no line here reads as such text
    "Goal (issue" + " 4): iterations differ by at most 1",
    "(issue" + " #12)",
    "Issues" + " 29 and 32 are blocked",
    "Files written before session" + " 16 may hold",
    "AVX2 loops (Session" + " 22, 2026-11-29)",
    "the work behind each figure, session by session",
    "all of this session side by side",
    "against a worktree of the session's start",
    "a grouped kernel (helper" + "-built, host-tested)",
    "the kernels were built by a helper",
    "no device was" + " lent this time",
    "the 16-core scaling still has not run (no machine lent)",
    "bash benchmarks/gpu_check.sh     # on the lent 16-core machine",
    "when a machine is lent",
    "the first device call of the day",
    "(issue" + " 12, defect 7)",
    "# ------------------------------------------------ sizes (item 4)",
    "see docs/journal.md",
    "the development journal",
    "the smoothed ReLU of paper 002",
    "Table 2 of Paper 002",
    "(papers 000-004)",
    "paper 003's equations (1)-(2)",
    "as in seed paper 003's single-buffer layout",
    "the seed papers' configurations",
    "the model of seed 004",
    "see ../shared/papers/002_4e07f7d93c9b7f4f.txt",
])
def test_the_patterns_catch_work_tracking(line):
    assert find_tracking_text([(1, line)]), line


@pytest.mark.parametrize("line", [
    "with opt.session():",
    "leaving the session sends \"done\"",
    "Hydra starts each rank in a session of its own",
    "from ._session import _RuleFailed, _Session",
    "the sessions below calibrate a few points",
    "Each session is one scratch folder",
    "in the order the core issues them",
    "journal: SIAM Journal on Scientific Computing",
    "Small helpers the benchmark scripts share",
    "samples drawn at random with seed",
    "not yet run on a GPU",
    "2 (P-1) items per rank",
    "the list holds 3 items",
    "Table 2 of Günther et al. 2020",
    "You, Buluç and Demmel, \"Scaling deep learning on GPU and Knights Landing clusters\"",
    "the paper's Peaks setup (width 8, 32 layers)",
    "data.peaks(300, seed=20261204)",
    "--seed 1 and seed 2 agree",
    "a paper from 2002",
    "the papers 2019 and 2020",
    "time.sleep(0.002)",
])
def test_the_patterns_spare_product_text(line):
    assert not find_tracking_text([(1, line)]), line


def test_there_is_no_development_journal():
    assert not (ROOT / "docs" / "journal.md").exists(), (
        "docs/journal.md is a work log: release history belongs in CHANGELOG.md")


def test_the_changelog_keeps_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog"), "CHANGELOG.md starts with '# Changelog'"
    assert "keepachangelog.com" in text, "CHANGELOG.md names the format it follows"
    releases = re.findall(r"^## \[(Unreleased|\d+\.\d+\.\d+[^\]]*)\](.*)$", text, re.MULTILINE)
    assert releases, "CHANGELOG.md has no '## [Unreleased]' or '## [x.y.z]' section"
    headers = re.findall(r"^## .*$", text, re.MULTILINE)
    stray = [h for h in headers if not re.match(r"^## \[(Unreleased|\d+\.\d+\.\d+[^\]]*)\]", h)]
    assert not stray, f"CHANGELOG.md sections that are not releases: {stray}"
    kinds = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        name = section.splitlines()[0]
        subs = re.findall(r"^### (.*)$", section, re.MULTILINE)
        assert set(subs) <= kinds, f"{name}: subsections {sorted(set(subs) - kinds)}"
        assert len(subs) == len(set(subs)), f"{name}: a subsection appears twice: {subs}"
