"""The gate: absolute thresholds on overall metrics, the blessing policy, the champion a
challenger is compared with, and the decision with its reasons."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

from gkeflow.components.evaluate.metrics import LOWER_IS_BETTER, OVERALL_METRICS, MetricSet


class EvaluationError(ValueError):
    """An evaluation request that cannot be carried out; the message says why."""


# ---------------------------------------------------------------------------------------------
# The blessing policy


@dataclass(frozen=True)
class Threshold:
    """An absolute requirement on one overall metric, e.g. ``f1_macro>=0.8``."""

    metric: str
    op: str
    value: float

    def holds(self, actual: float | None) -> bool:
        if actual is None:
            return False
        return {">=": operator.ge, "<=": operator.le}[self.op](actual, self.value)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


_THRESHOLD = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*(>=|<=)\s*([-+0-9.eE]+)\s*$")


def parse_thresholds(text: str, metrics: tuple[str, ...] = OVERALL_METRICS,
                     kind: str = "", example: str = "f1_macro>=0.8") -> list[Threshold]:
    """``"f1_macro>=0.8, log_loss<=0.5"`` -> thresholds over ``metrics`` (a classifier's
    by default); unknown metrics are errors, named with ``kind`` (e.g. "regression")."""
    thresholds = []
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        match = _THRESHOLD.match(item)
        if not match:
            raise EvaluationError(
                f"invalid threshold {item!r}: expected <metric>>=<number> or "
                f"<metric><=<number>, e.g. {example}"
            )
        metric, op, raw = match.groups()
        if metric not in metrics:
            what = f"{metric!r}, not a {kind} metric" if kind else f"unknown metric {metric!r}"
            raise EvaluationError(
                f"threshold {item!r} names {what}; valid: {', '.join(metrics)}")
        try:
            value = float(raw)
        except ValueError:
            raise EvaluationError(f"threshold {item!r}: {raw!r} is not a number") from None
        if not math.isfinite(value):
            raise EvaluationError(f"threshold {item!r}: the bound must be finite")
        thresholds.append(Threshold(metric, op, value))
    return thresholds


@dataclass(frozen=True)
class BlessingPolicy:
    """When a challenger is blessed.

    Attributes:
        min_accuracy: Test accuracy the challenger must reach.
        thresholds: Further absolute requirements on overall metrics.
        comparison_metric: Metric on which the challenger must not regress against the
            champion.
        regression_tolerance: How far (absolute) the challenger may fall behind the champion
            on ``comparison_metric`` and still be blessed.
    """

    min_accuracy: float = 0.8
    thresholds: tuple[Threshold, ...] = ()
    comparison_metric: str = "accuracy"
    regression_tolerance: float = 0.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_accuracy <= 1.0):
            raise EvaluationError(f"min_accuracy must be between 0 and 1; got {self.min_accuracy}")
        if self.comparison_metric not in OVERALL_METRICS:
            raise EvaluationError(
                f"unknown comparison_metric {self.comparison_metric!r}; valid: "
                f"{', '.join(OVERALL_METRICS)}"
            )
        if not (math.isfinite(self.regression_tolerance) and self.regression_tolerance >= 0):
            raise EvaluationError(
                f"regression_tolerance must be a finite number >= 0; got "
                f"{self.regression_tolerance}"
            )

    @classmethod
    def from_parameters(cls, min_accuracy: float, thresholds: str = "",
                        comparison_metric: str = "accuracy",
                        regression_tolerance: float = 0.0) -> BlessingPolicy:
        return cls(min_accuracy, tuple(parse_thresholds(thresholds)), comparison_metric,
                   regression_tolerance)


@dataclass
class Check:
    """One requirement of the blessing and whether the challenger meets it."""

    name: str
    ok: bool
    detail: str


@dataclass
class Decision:
    blessed: bool
    checks: list[Check]

    @property
    def reasons(self) -> list[str]:
        return [("PASS " if c.ok else "FAIL ") + c.detail for c in self.checks]

    @property
    def summary(self) -> str:
        failed = [c.detail for c in self.checks if not c.ok]
        if self.blessed:
            return "blessed: " + "; ".join(c.detail for c in self.checks)
        return "not blessed: " + "; ".join(failed)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


@dataclass
class Champion:
    """The registry's current champion and how it scored on this test split."""

    name: str
    version: int
    uri: str
    aliases: tuple[str, ...]
    metrics: MetricSet | None = None
    not_comparable: str = ""

    @property
    def label(self) -> str:
        alias = f" ({', '.join(self.aliases)})" if self.aliases else " (latest version)"
        return f"{self.name} v{self.version}{alias}"


def decide(challenger: MetricSet, champion: Champion | None,
           policy: BlessingPolicy) -> Decision:
    """Bless ``challenger`` when it meets every threshold and does not regress on the champion."""
    checks = [Check(
        "min_accuracy", challenger.accuracy >= policy.min_accuracy,
        f"accuracy {challenger.accuracy:.4f} "
        f"{'>=' if challenger.accuracy >= policy.min_accuracy else '<'} "
        f"min_accuracy {policy.min_accuracy:g}",
    )]
    overall = challenger.overall()
    for threshold in policy.thresholds:
        actual = overall[threshold.metric]
        ok = threshold.holds(actual)
        checks.append(Check(
            f"threshold {threshold}", ok,
            f"{threshold.metric} {_fmt(actual)} {'meets' if ok else 'misses'} {threshold}"
            + (" (undefined on this test split)" if actual is None else ""),
        ))
    metric = policy.comparison_metric
    if champion is None:
        checks.append(Check("champion", True, "no champion registered: thresholds alone decide"))
    elif champion.metrics is None:
        checks.append(Check(
            "champion", True,
            f"champion {champion.label} is not comparable ({champion.not_comparable}): "
            "thresholds alone decide",
        ))
    else:
        mine, theirs = overall[metric], champion.metrics.overall()[metric]
        if mine is None or theirs is None:
            checks.append(Check(
                "champion", False,
                f"{metric} is undefined on this test split (challenger {_fmt(mine)}, champion "
                f"{_fmt(theirs)}), so no regression against {champion.label} can be ruled out",
            ))
        else:
            lower_better = metric in LOWER_IS_BETTER
            regression = (mine - theirs) if lower_better else (theirs - mine)
            ok = regression <= policy.regression_tolerance + 1e-12
            if regression <= 0:
                verdict = "is no worse"
            elif ok:
                verdict = (f"regresses by {regression:.4f}, within the tolerance "
                           f"{policy.regression_tolerance:g}")
            else:
                verdict = (f"regresses by {regression:.4f}, beyond the tolerance "
                           f"{policy.regression_tolerance:g}")
            checks.append(Check(
                "champion", ok,
                f"{metric} {mine:.4f} vs champion {champion.label} {theirs:.4f} "
                f"({'lower' if lower_better else 'higher'} is better): {verdict}",
            ))
    return Decision(blessed=all(c.ok for c in checks), checks=checks)
