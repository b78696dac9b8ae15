"""pytest at the repository root: doctests of braidpy.torch need torch (the torch extra);
tests/data/*.py are scripts that regenerate saved reference outputs from XBraid and PyMGRIT
runs (they need those programs), not modules to collect."""

import importlib.util

collect_ignore_glob = ["tests/data/*.py"]
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob.append("braidpy/torch/*")
