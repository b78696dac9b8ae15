"""Old spellings of renamed public arguments and attributes, accepted with a warning.

braidpy's public API has one name per concept (docs/conventions.md, "Names"). A name
that changed keeps working for a while: the old spelling gives a DeprecationWarning
that names the new one and points at the caller's line, and passing both spellings is
a TypeError (which one was meant cannot be known).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar

__all__ = ["renamed_arguments", "renamed_attribute"]

F = TypeVar("F", bound=Callable[..., Any])


def _warn(message: str, stacklevel: int) -> None:
    # +1: this helper's own frame.
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)


def renamed_arguments(keywords: Optional[Mapping[str, str]] = None,
                      now_keyword_only: Sequence[str] = ()) -> Callable[[F], F]:
    """Decorate a function whose arguments were renamed or made keyword-only.

    ``keywords`` maps each old keyword to its new name. ``now_keyword_only`` names, in
    their old order, parameters that used to follow the positional ones and are now
    keyword-only: such values passed by position are still accepted. The decorated
    function keeps its (new) signature for ``inspect`` and help().
    """
    renames = dict(keywords or {})

    def decorate(func: F) -> F:
        name = func.__qualname__.replace(".__init__", "")
        positional = [p for p in inspect.signature(func).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        npositional = len(positional)
        place = {p.name: i for i, p in enumerate(positional)}
        owner_shift = 1 if positional and positional[0].name in ("self", "cls") else 0

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            extra = args[npositional:]
            if extra and len(extra) <= len(now_keyword_only):
                args = args[:npositional]
                for key, value in zip(now_keyword_only, extra):
                    if key in kwargs:
                        raise TypeError(f"{name}() got multiple values for argument {key!r}")
                    where = npositional - owner_shift + now_keyword_only.index(key) + 1
                    _warn(f"{name}: passing {key} by position (argument {where}) is "
                          f"deprecated; pass it as {key}=... instead", 2)
                    kwargs[key] = value
            for old, new in renames.items():
                if old not in kwargs:
                    continue
                if new in kwargs or place.get(new, npositional) < len(args):
                    raise TypeError(f"{name}() got both {old}= and {new}=; {old} is the old "
                                    f"name of {new}, pass only {new}")
                _warn(f"{name}: the keyword {old}= is deprecated; use {new}= instead", 2)
                kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def renamed_attribute(old: str, new: str) -> property:
    """A read-only property ``old`` that warns and returns the attribute ``new``."""
    def read(self: Any) -> Any:
        _warn(f"{type(self).__name__}.{old} is deprecated; use .{new} instead", 2)
        return getattr(self, new)

    read.__name__ = old
    return property(read, doc=f"Deprecated name of :attr:`{new}`.")
