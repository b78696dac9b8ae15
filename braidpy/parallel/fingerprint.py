"""Checks that every rank was given the same problem, with one small collective.

A parallel solve is one computation spread over ranks: the time grid, the options and
the layer layout must be the same on each of them. When they differ (one rank passes
``cfactor=8``, or ``tstop=6.0``), the ranks compute different schedules: they wait for
messages that never come (a hang), receive the wrong ones ("message protocol error"),
or agree on a wrong answer without noticing. :func:`same_everywhere` turns each of
these into one clear error, on every rank, before any work:

>>> same_everywhere(None, {"tstop": 5.0, "cfactor": 2})   # serial: nothing to compare

Cost: each rank hashes its fields (microseconds; an array field is hashed once) and
the ranks exchange a 24-byte digest in one ``Allgather``. Only when the digests
differ do they exchange more: each field's digest and a short display of its value,
so that every rank can name the first field that differs and its value on each rank.
Serially (no communicator, or one rank) nothing is exchanged.

The same exchange also carries "this rank could not even build its fields" (a bad
argument on one rank only): pass that exception as ``error``; it is re-raised there
and every other rank raises :class:`braidpy.BraidError` naming it, as
:mod:`braidpy.parallel.agree` does. Either way no rank is left waiting.

Values are compared by content, never by identity: ``2`` and ``2.0`` are equal, a
list equals the tuple of the same items, a mapping is compared by its sorted items,
an array by its dtype, shape and bytes. Objects of other types are compared by their
type and ``repr`` (which must then not contain an address).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .._errors import BraidError, RankMismatchError
from .agree import Agreement, safe_text
from .collectives import allgather_ints, allgather_texts
from .comm import rank_size

__all__ = ["same_everywhere", "fingerprint", "encode", "display"]

DISPLAY_CHARS = 120  # a value shown in a message is cut to this many characters


def encode(value: Any) -> bytes:
    """The canonical bytes of ``value`` (equal values, equal bytes; see module doc).

    >>> encode(2) == encode(2.0), encode([1, 2]) == encode((1, 2)), encode(1) == encode(True)
    (True, True, False)
    """
    out: List[bytes] = []
    _encode(value, out)
    return b"".join(out)


def _text(tag: bytes, text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return b"%s%d:%s" % (tag, len(data), data)


def _float(f: float) -> bytes:
    if f.is_integer() and abs(f) < 2.0**63:  # 2.0 is 2; -0.0 is 0
        return b"I%d" % int(f)
    return b"F" + (f.hex() if math.isfinite(f) else repr(f)).encode()


# The common exact types first: isinstance against the numbers ABCs is slow.
_EXACT = {type(None): lambda v: b"N", bool: lambda v: b"B1" if v else b"B0",
          int: lambda v: b"I%d" % v, float: _float, str: lambda v: _text(b"S", v)}


def _encode(v: Any, out: List[bytes]) -> None:
    exact = _EXACT.get(type(v))
    if exact is not None:
        out.append(exact(v))
    elif isinstance(v, (bool, np.bool_)):
        out.append(b"B1" if v else b"B0")
    elif isinstance(v, numbers.Integral):
        out.append(b"I%d" % int(v))
    elif isinstance(v, numbers.Real):
        out.append(_float(float(v)))
    elif isinstance(v, str):
        out.append(_text(b"S", v))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        data = bytes(v)
        out.append(b"Y" + str(len(data)).encode() + b":" + data)
    elif isinstance(v, np.ndarray):
        a = np.ascontiguousarray(v)
        head = f"{a.dtype.str}{a.shape}"
        if a.dtype.kind in "biufc":  # numbers: by their bytes (a grid is hashed once)
            out.append(_text(b"A", head) + hashlib.sha256(a.tobytes()).digest())
        else:
            out.append(_text(b"A", head + safe_text(a.tolist(), repr)))
    elif type(v) is dict or isinstance(v, Mapping):
        items = sorted((encode(key), encode(item)) for key, item in v.items())
        out.append(b"M" + str(len(items)).encode() + b"{")
        for key_bytes, item_bytes in items:
            out.extend((key_bytes, b"=", item_bytes, b";"))
        out.append(b"}")
    elif type(v) in (list, tuple) or isinstance(v, (list, tuple, range)):
        out.append(b"L" + str(len(v)).encode() + b"[")
        for x in v:
            _encode(x, out)
            out.append(b",")
        out.append(b"]")
    elif dataclasses.is_dataclass(v) and not isinstance(v, type):
        out.append(_text(b"D", type(v).__qualname__))
        _encode({f.name: getattr(v, f.name) for f in dataclasses.fields(v)}, out)
    else:
        out.append(_text(b"O", f"{type(v).__module__}.{type(v).__qualname__}:{safe_text(v, repr)}"))


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _field_digests(fields: Mapping[str, Any]) -> List[Tuple[str, bytes]]:
    return [(str(name), _digest(encode(value))) for name, value in fields.items()]


def fingerprint(fields: Mapping[str, Any]) -> bytes:
    """The 16-byte digest of the named ``fields`` (names, order and values): one
    encoding pass and one SHA-256 (per-field digests only once they differ).

    >>> fingerprint({"a": 1}) == fingerprint({"a": 1.0}) != fingerprint({"b": 1})
    True
    """
    out: List[bytes] = []
    for name, value in fields.items():
        out.append(_text(b"K", str(name)))
        _encode(value, out)
    return hashlib.sha256(b"".join(out)).digest()[:16]


def display(value: Any) -> str:
    """A short text of ``value`` for messages (arrays: shape, range and a digest).

    >>> display(5.0), display({"default": 2, 0: 4})
    ('5.0', "{0: 4, 'default': 2}")
    >>> display(np.linspace(0.0, 1.0, 5))  # doctest: +ELLIPSIS
    'array of shape (5,) float64 from 0.0 to 1.0 (sha256 ...)'
    """
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        span = ""
        if a.size and a.dtype.kind in "biuf":
            span = f" from {a.reshape(-1)[0].item()!r} to {a.reshape(-1)[-1].item()!r}"
        text = (f"array of shape {a.shape} {a.dtype}{span} "
                f"(sha256 {hashlib.sha256(encode(a)).hexdigest()[:12]})")
    elif isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: encode(kv[0]))
        text = "{" + ", ".join(f"{display(k)}: {display(x)}" for k, x in items) + "}"
    elif isinstance(value, str):
        text = repr(value)
    elif isinstance(value, (bool, np.bool_)):
        text = str(bool(value))
    elif isinstance(value, numbers.Integral):
        text = str(int(value))
    elif isinstance(value, numbers.Real):
        text = repr(float(value))
    else:
        text = safe_text(value, repr)
    return text if len(text) <= DISPLAY_CHARS else text[:DISPLAY_CHARS - 3] + "..."


def _rank_list(ranks: Sequence[int]) -> str:
    names = [str(r) for r in ranks]
    if len(names) == 1:
        return f"rank {names[0]}"
    return f"ranks {', '.join(names[:-1])} and {names[-1]}"


def _first_difference(reports: List[List[Tuple[str, str, str]]]) -> Optional[Tuple[str, List[str]]]:
    """(field, display on each rank) of the first field whose digests differ: rank 0's
    order, then names only later ranks have."""
    order: List[str] = []
    tables: List[Dict[str, Tuple[str, str]]] = []
    for report in reports:
        table = {}
        for name, digest, shown in report:
            table[name] = (digest, shown)
            if name not in order:
                order.append(name)
        tables.append(table)
    for name in order:
        got = [t.get(name) for t in tables]
        if len({g[0] if g else None for g in got}) > 1:
            displays = [g[1] if g else "(not given)" for g in got]
            # Values cut to one display (long texts alike in their first characters)
            # are told apart by their digests, never named as one value.
            digests: Dict[str, set] = {}
            for g, text in zip(got, displays):
                digests.setdefault(text, set()).add(g[0] if g else None)
            return name, [f"{text} (digest {g[0][:12]})" if g and len(digests[text]) > 1
                          else text for g, text in zip(got, displays)]
    return None


def _mismatch(comm: Any, fields: Mapping[str, Any], what: str, hint: str,
              ranks: Sequence[int]) -> RankMismatchError:
    """The error every rank raises once the digests differ (collective)."""
    mine = [[name, d.hex(), display(fields[name])] for name, d in _field_digests(fields)]
    texts = allgather_texts(comm, json.dumps(mine))
    reports = []
    for text in texts:
        try:
            reports.append([(str(row[0]), str(row[1]), str(row[2]))
                            for row in json.loads(text or "[]")])
        except (ValueError, TypeError, IndexError, KeyError):  # not ours: say so rather than guess
            reports.append([])
    found = _first_difference(reports)
    if found is None:  # same fields, same values, another order
        field, values = "(the order of the fields)", [
            ", ".join(row[0] for row in r) for r in reports]
    else:
        field, values = found
    groups: Dict[str, List[int]] = {}
    for r, shown in enumerate(values):
        groups.setdefault(shown, []).append(ranks[r])
    where = "; ".join(f"{shown} on {_rank_list(rs)}" for shown, rs in groups.items())
    message = f"the ranks disagree on {what}: {field} is {where}"
    if hint:
        message += f" ({hint})"
    return RankMismatchError(message, field=field, values=tuple(values))


def same_everywhere(comm: Any, fields: Optional[Mapping[str, Any]], what: str = "the problem",
                    *, hint: str = "", error: Optional[BaseException] = None,
                    ranks: Optional[Sequence[int]] = None) -> None:
    """Check that every rank of ``comm`` holds the same ``fields`` (collective).

    Parameters
    ----------
    comm : mpi4py communicator or None
        None or a one-rank communicator: nothing is exchanged (and ``error``, if
        given, is raised as it is).
    fields : mapping of str to value, or None
        The named values that must agree, in the order to search them for the first
        difference. None when ``error`` is given.
    what : str
        What the fields describe, for the messages ("the problem").
    hint : str
        Appended to the mismatch message: what the user must make equal.
    error : exception, optional
        This rank's failure to build ``fields``: re-raised here after the exchange;
        every other rank raises :class:`braidpy.BraidError` naming it.
    ranks : sequence of int, optional
        The number each rank is known by in messages (as in :func:`agreed`).

    Raises
    ------
    RankMismatchError
        On every rank, when the fields differ: names the first differing field and
        its value on each rank (``.field``, ``.values``).
    """
    rank, size = rank_size(comm)
    if size == 1:
        if error is not None:
            try:
                raise error
            finally:
                del error  # no exception <-> frame cycle (braidpy.parallel.agree)
        return
    names = list(range(size)) if ranks is None else list(ranks)
    if error is None:
        word = np.frombuffer(fingerprint(fields or {}), dtype="<i8")
        mine = [0, int(word[0]), int(word[1])]
    else:
        mine = [1, 0, 0]
    rows = allgather_ints(comm, mine)  # the one collective of the common case
    if rows[:, 0].any():  # some rank could not build its fields
        try:
            Agreement(comm, f"checking {what}", names).settle(error)
        finally:
            del error
        raise BraidError(f"checking {what} failed on another rank")  # settle raised
    if (rows[:, 1:] == rows[0, 1:]).all():
        return
    raise _mismatch(comm, fields or {}, what, hint, names)
