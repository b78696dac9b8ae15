"""What check_app found: the rule list, the report and the exception it raises."""

from __future__ import annotations

import dataclasses

__all__ = ["RESIDUAL_RULE", "RULES", "SPATIAL_RULES", "AppCheckError", "CheckReport"]

#: The rules :func:`check_app` checks, in the order it reports them.
RULES: tuple[str, ...] = (
    "init",
    "sum identity",
    "clone independence",
    "sum linearity",
    "sum aliasing",
    "norm scaling",
    "buffer round trip",
    "step determinism",
    "step in place",
    "access",
)

#: The rules :func:`check_coarsen_refine` checks, in the order it reports them.
SPATIAL_RULES: tuple[str, ...] = ("coarsen", "refine")


#: Checked after :data:`RULES` for apps that define ``residual`` (XBraid's
#: braid_TestResidual): ``residual(step(u, fstop=f), u)`` must give back ``f``, for
#: ``f = None`` (zero) and ``f = 2 u``.
RESIDUAL_RULE = "residual"


@dataclasses.dataclass
class CheckReport:
    """What :func:`check_app` found, rule by rule.

    Attributes
    ----------
    app : str
        Class name of the checked app.
    passed : list of str
        Rules that hold, in :data:`RULES` order.
    failed : list of (str, str)
        ``(rule, why)`` for each rule that does not hold, with the values seen.
    skipped : list of (str, str)
        ``(rule, why)`` for rules not checked because a rule they rely on failed.
    notes : list of (str, str)
        ``(rule, remark)``: warnings that are not failures (e.g. a step that left
        its input unchanged).
    errors : dict of str to Exception
        The exception a user callback raised, for each rule that failed that way.
    check : str
        The function that made the report (``check_app`` or ``check_coarsen_refine``).
    rules : tuple of str
        The rules it checks, in report order (:data:`RULES` or :data:`SPATIAL_RULES`).
    """

    app: str
    passed: list[str] = dataclasses.field(default_factory=list)
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    notes: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    errors: dict[str, Exception] = dataclasses.field(default_factory=dict)
    check: str = "check_app"
    rules: tuple[str, ...] = RULES

    @property
    def ok(self) -> bool:
        """True when no rule failed."""
        return not self.failed

    def headline(self) -> str:
        """One line: the app and the failed rules, if any."""
        if self.ok and not self.skipped:
            return f"{self.check}({self.app}): all {len(self.passed)} rules passed"
        names = ", ".join(repr(rule) for rule, _ in self.failed)
        n = len(self.failed)
        return (f"{self.check}({self.app}): {n} rule{'' if n == 1 else 's'} failed ({names}); "
                f"{len(self.passed)} passed, {len(self.skipped)} not checked")

    def __str__(self) -> str:
        lines = [self.headline()]
        why = {rule: ("FAILED", text) for rule, text in self.failed}
        why.update({rule: ("skipped", text) for rule, text in self.skipped})
        extra = (RESIDUAL_RULE,) if RESIDUAL_RULE not in self.rules and (
            RESIDUAL_RULE in self.passed or RESIDUAL_RULE in why) else ()
        for rule in self.rules + extra:
            if rule in why:
                tag, text = why[rule]
                lines.append(f"  {tag:<8} {rule}: {text}")
            elif rule in self.passed:
                lines.append(f"  {'ok':<8} {rule}")
            for note_rule, text in self.notes:
                if note_rule == rule:
                    lines.append(f"  {'note':<8} {rule}: {text}")
        return "\n".join(lines)


class AppCheckError(AssertionError):
    """Raised by :func:`check_app` when a rule fails; ``.report`` holds the details.

    The message names every failed rule and says why each failed.
    """

    def __init__(self, report: CheckReport):
        super().__init__(str(report))
        self.report = report
