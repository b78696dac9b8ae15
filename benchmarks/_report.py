"""Small helpers the benchmark scripts share: statistics over repeats and plain tables."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

__all__ = ["microseconds", "min_median", "print_table", "seconds"]


def min_median(values: Iterable[float]) -> tuple[float, float]:
    """(min, median) of repeated measurements."""
    values = list(values)
    return min(values), statistics.median(values)


def seconds(value: float) -> str:
    return f"{value:.3f} s" if value >= 0.1 else f"{value * 1e3:.2f} ms"


def microseconds(value: float) -> str:
    return f"{value * 1e6:.3f} us"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str = "") -> None:
    """Print rows under headers, columns padded to their widest cell (first left, rest right)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row):
        first = row[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        return "  ".join([first] + rest)

    if title:
        print(title)
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    print()
