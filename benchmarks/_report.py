"""Earlier name of _harness.py (scripts written against it still run); new ones import _harness."""
from _harness import microseconds, min_median, print_table, seconds  # noqa: F401
