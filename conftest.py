"""pytest at the repository root: doctests of braidpy.torch need torch (the torch extra)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["braidpy/torch/*"]
