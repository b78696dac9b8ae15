"""braidpy/_core.pyi matches the compiled module: mypy's stubtest, and the
parameter names pybind11 writes into each docstring (which stubtest cannot see)."""

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from braidpy import _core

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "braidpy" / "_core.pyi"


def test_stubtest_reports_nothing():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    modules = ["braidpy._core"]
    if importlib.util.find_spec("braidpy._cuda") is not None:  # optional (BRAIDPY_CUDA)
        modules.append("braidpy._cuda")
    proc = subprocess.run([sys.executable, "-m", "mypy.stubtest", *modules], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _split_top_level(params: str) -> list:
    """Split "a: X, b: Y[int, str] = 1" at commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(params):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(params[start:i])
            start = i + 1
    out.append(params[start:])
    return [p.strip() for p in out if p.strip()]


def runtime_parameters(fn):
    """Parameter names of pybind11's docstring signature, or None without one."""
    first_line = (fn.__doc__ or "").partition("\n")[0]
    match = re.match(r"\w+\((.*)\) ->", first_line)
    if match is None:
        return None
    return [re.split(r"[:=]", p)[0].strip() for p in _split_top_level(match.group(1))]


def stub_parameters(node: ast.FunctionDef) -> list:
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [p.arg for p in a.kwonlyargs]
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return names


def stub_methods():
    """(class name, method node) of every plain method in the stub."""
    tree = ast.parse(STUB.read_text())
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef):
            for node in cls.body:
                if isinstance(node, ast.FunctionDef) and not node.decorator_list:
                    yield cls.name, node


def test_stub_parameter_names_match_the_module():
    checked, wrong = 0, []
    for cls_name, node in stub_methods():
        cls = getattr(_core, cls_name, None)
        if cls is None or cls_name.startswith("_"):
            continue
        runtime = runtime_parameters(getattr(cls, node.name))
        if runtime is None:  # no pybind11 signature (e.g. a class without constructor)
            continue
        stub = stub_parameters(node)
        if runtime == ["self", "**kwargs"]:
            # Keyword constructor: the stub spells out the writable fields.
            fields = [k for k, v in vars(cls).items() if isinstance(v, property) and v.fset]
            ok = stub[0] == "self" and sorted(stub[1:]) == sorted(fields)
        else:
            ok = stub == runtime
        checked += 1
        if not ok:
            wrong.append(f"{cls_name}.{node.name}: stub {stub}, module {runtime}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 10
