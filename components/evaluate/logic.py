"""Evaluation: score the challenger (and the registry's champion) on the test split, decide.

:func:`evaluate` loads the new model, computes its metrics, slices them by chosen
categorical columns, looks up the current champion of ``model_name`` in the registry,
scores it on the very same test split, and blesses the challenger only when it meets
the absolute thresholds and does not regress beyond a tolerance on the comparison
metric. Everything it found is in the returned :class:`Evaluation`.
"""

from __future__ import annotations

import json
import math
import operator
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gkeflow.components.evaluate.metrics import (
    LOWER_IS_BETTER,
    OVERALL_METRICS,
    Curve,
    MetricsError,
    MetricSet,
    compute_metrics,
    log_loss,
    metric_key,
    positive_class_roc,
)
from gkeflow.components.prepare.logic import Schema, load_split
from gkeflow.components.train.logic import ExportedModel, encode_labels, to_model_inputs

#: Slice columns chosen automatically (``slice_columns=""``) have at most this many values.
AUTO_SLICE_MAX_VALUES = 20
#: A slice column keeps its most frequent values; the rest are pooled as "(other)".
MAX_SLICE_VALUES = 25
MISSING_VALUE = "(missing)"
OTHER_VALUES = "(other)"


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


def parse_thresholds(text: str) -> list[Threshold]:
    """``"f1_macro>=0.8, log_loss<=0.5"`` -> thresholds; unknown metrics are errors."""
    thresholds = []
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        match = _THRESHOLD.match(item)
        if not match:
            raise EvaluationError(
                f"invalid threshold {item!r}: expected <metric>>=<number> or "
                f"<metric><=<number>, e.g. f1_macro>=0.8"
            )
        metric, op, raw = match.groups()
        if metric not in OVERALL_METRICS:
            raise EvaluationError(
                f"threshold {item!r} names unknown metric {metric!r}; valid: "
                f"{', '.join(OVERALL_METRICS)}"
            )
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
    probabilities: np.ndarray | None = field(default=None, repr=False)

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


# ---------------------------------------------------------------------------------------------
# Slices


@dataclass
class SliceMetrics:
    column: str
    value: str
    examples: int
    accuracy: float
    f1_macro: float
    log_loss: float
    champion_accuracy: float | None = None


def choose_slice_columns(schema: Schema, test: pd.DataFrame, requested: str) -> list[str]:
    """The columns to slice by: ``requested`` (comma-separated) checked against the schema,
    or, when empty, every categorical feature with at most AUTO_SLICE_MAX_VALUES values."""
    categorical = [c.name for c in schema.features if c.type == "categorical"]
    names = [n.strip() for n in (requested or "").split(",") if n.strip()]
    if not names:
        return [c for c in categorical
                if test[c].nunique(dropna=False) <= AUTO_SLICE_MAX_VALUES]
    types = {c.name: c.type for c in schema.columns}
    for name in names:
        if name == schema.label:
            raise EvaluationError(
                f"slice column {name!r} is the label; per-class metrics already cover it")
        if name not in types:
            raise EvaluationError(
                f"slice column {name!r} is not in the data; categorical columns: "
                f"{', '.join(categorical) or '(none)'}")
        if name not in categorical:
            raise EvaluationError(
                f"slice column {name!r} is {types[name]}; slices need categorical columns: "
                f"{', '.join(categorical) or '(none)'}")
    return list(dict.fromkeys(names))


def slice_values(values: pd.Series) -> pd.Series:
    """Each row's slice: its value, "(missing)", or "(other)" beyond the most frequent ones."""
    text = values.astype(object).where(values.notna(), MISSING_VALUE).astype(str)
    kept = text.value_counts().index[:MAX_SLICE_VALUES - 1]
    if text.nunique() > MAX_SLICE_VALUES:
        text = text.where(text.isin(kept), OTHER_VALUES)
    return text


def slice_metrics(test: pd.DataFrame, columns: list[str], true: np.ndarray,
                  probabilities: np.ndarray,
                  champion_probabilities: np.ndarray | None = None) -> list[SliceMetrics]:
    """Accuracy, macro F1 (over the classes seen in the slice) and log loss per slice value."""
    predicted = probabilities.argmax(axis=1)
    results = []
    for column in columns:
        groups = slice_values(test[column].reset_index(drop=True))
        for value in sorted(groups.unique()):
            rows = np.flatnonzero((groups == value).to_numpy())
            t, p = true[rows], predicted[rows]
            f1s = []
            for c in np.union1d(t, p):
                tp = int(np.sum((t == c) & (p == c)))
                denominator = int(np.sum(t == c)) + int(np.sum(p == c))
                f1s.append(2 * tp / denominator if denominator else 0.0)
            champion_accuracy = None
            if champion_probabilities is not None:
                champion_accuracy = float(
                    np.mean(champion_probabilities[rows].argmax(axis=1) == t))
            results.append(SliceMetrics(
                column=column, value=value, examples=len(rows),
                accuracy=float(np.mean(p == t)), f1_macro=float(np.mean(f1s)),
                log_loss=log_loss(t, probabilities[rows]),
                champion_accuracy=champion_accuracy,
            ))
    return results


# ---------------------------------------------------------------------------------------------
# The champion


def find_champion(registry_uri: str, model_name: str):
    """The registry's ``champion`` of ``model_name``, else its latest version, else None."""
    from gkeflow.components.register.backends import champion_or_latest, open_registry

    return champion_or_latest(open_registry(registry_uri), model_name)


def local_model_dir(uri: str, scratch: Path) -> Path:
    """A local directory holding the SavedModel at ``uri``.

    Local paths and ``file://`` URIs are used in place; ``gs://`` URIs are read through the
    ``/gcs/`` mount where the step has one (Vertex AI), else copied with ``tf.io.gfile``.
    """
    if "://" not in uri:
        return Path(uri)
    scheme, rest = uri.split("://", 1)
    if scheme == "file":
        return Path(rest)
    if scheme == "gs":
        mounted = Path("/gcs") / rest
        if mounted.is_dir():
            return mounted
        import tensorflow as tf

        target = scratch / "champion"
        for directory, _, files in tf.io.gfile.walk(uri):
            relative = directory[len(uri.rstrip("/")):].lstrip("/")
            (target / relative).mkdir(parents=True, exist_ok=True)
            for name in files:
                tf.io.gfile.copy(f"{directory.rstrip('/')}/{name}", str(target / relative / name))
        return target
    raise EvaluationError(f"cannot load the champion model from {uri!r}: unsupported scheme "
                          f"{scheme!r} (local paths, file:// and gs:// are supported)")


def score_champion(version, test: pd.DataFrame, schema: Schema, true: np.ndarray,
                   positive_class: str) -> Champion:
    """Load the champion's model from its URI and score it on the test split."""
    champion = Champion(name=version.name, version=int(version.version), uri=version.uri,
                        aliases=tuple(version.aliases))
    with tempfile.TemporaryDirectory(prefix="gkeflow-champion-") as scratch:
        model_dir = local_model_dir(version.uri, Path(scratch))
        try:
            model = ExportedModel(model_dir)
        except (FileNotFoundError, OSError) as exc:
            raise EvaluationError(
                f"champion {champion.label} cannot be loaded from {version.uri}: {exc}"
            ) from exc
        labels = schema.label_vocabulary
        if sorted(model.label_vocabulary) != sorted(labels):
            champion.not_comparable = (
                f"it predicts labels {model.label_vocabulary}, this data has {labels}")
            return champion
        missing = sorted({f["name"] for f in model.metadata["features"]}
                         - {c.name for c in schema.features})
        if missing:
            champion.not_comparable = f"it needs features this data lacks: {', '.join(missing)}"
            return champion
        probabilities = model.predict_proba(_champion_inputs(model, test))
    order = [model.label_vocabulary.index(label) for label in labels]
    champion.probabilities = probabilities[:, order]
    champion.metrics = compute_metrics(true, champion.probabilities, labels, positive_class)
    return champion


def _champion_inputs(model: ExportedModel, test: pd.DataFrame) -> dict[str, np.ndarray]:
    from gkeflow.components.train.logic import column_to_input

    return {f["input"]: column_to_input(test[f["name"]], f["type"])
            for f in model.metadata["features"]}


# ---------------------------------------------------------------------------------------------
# The evaluation


@dataclass
class Evaluation:
    """Everything the evaluation found: the evidence behind the decision."""

    model_name: str
    metrics: MetricSet
    roc_class: str
    roc: Curve
    slices: list[SliceMetrics]
    champion: Champion | None
    decision: Decision
    policy: BlessingPolicy
    data: dict[str, Any]

    @property
    def passed(self) -> bool:
        return self.decision.blessed

    def scalar_metrics(self) -> dict[str, float]:
        """The ``Metrics`` artifact: overall, per-class and per-slice accuracy, all finite."""
        values = self.metrics.scalars()
        for s in self.slices:
            key = f"slice_{metric_key(s.column)}_{metric_key(s.value)}"
            n = 2
            while f"{key}_accuracy" in values:  # values that differ only in punctuation
                key, n = f"slice_{metric_key(s.column)}_{metric_key(s.value)}_{n}", n + 1
            values[f"{key}_accuracy"] = s.accuracy
        return values

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready evidence: metrics, champion, slices, decision (None for undefined)."""
        def metric_set(m: MetricSet) -> dict[str, Any]:
            return {
                "overall": m.overall(),
                "per_class": {k: vars(v) for k, v in m.per_class.items()},
                "confusion_matrix": m.confusion_matrix,
                "labels": m.labels,
                "examples": m.examples,
            }

        champion = None
        if self.champion is not None:
            champion = {
                "name": self.champion.name, "version": self.champion.version,
                "uri": self.champion.uri, "aliases": list(self.champion.aliases),
                "not_comparable": self.champion.not_comparable,
                "metrics": metric_set(self.champion.metrics) if self.champion.metrics else None,
            }
        return {
            "model_name": self.model_name,
            "blessed": self.decision.blessed,
            "reasons": self.decision.reasons,
            "checks": [vars(c) for c in self.decision.checks],
            "policy": {
                "min_accuracy": self.policy.min_accuracy,
                "thresholds": [str(t) for t in self.policy.thresholds],
                "comparison_metric": self.policy.comparison_metric,
                "regression_tolerance": self.policy.regression_tolerance,
            },
            "data": self.data,
            "challenger": metric_set(self.metrics),
            "champion": champion,
            "slices": [vars(s) for s in self.slices],
            "roc": {"class": self.roc_class, "points": len(self.roc)},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def data_summary(dataset_dir: Path, schema: Schema, test: pd.DataFrame) -> dict[str, Any]:
    """Rows per split, the features and the class distribution of the test split."""
    rows: dict[str, int] = {}
    stats_path = Path(dataset_dir) / "stats.json"
    if stats_path.exists():  # what prepare_data counted
        recorded = json.loads(stats_path.read_text(encoding="utf-8"))
        rows = {split: int(n) for split, n in recorded.get("split_rows", {}).items()}
        rows["rejected"] = int(recorded.get("rejected_rows", 0))
    else:
        rows["test"] = len(test)
    counts = test[schema.label].astype(str).value_counts()
    return {
        "label": schema.label,
        "rows": rows,
        "features": [{"name": c.name, "type": c.type} for c in schema.features],
        "test_class_counts": {label: int(counts.get(label, 0))
                              for label in schema.label_vocabulary},
    }


def evaluate(
    dataset_dir: Path,
    schema: Schema,
    model_dir: Path,
    min_accuracy: float = 0.8,
    *,
    model_name: str = "",
    registry_uri: str = "",
    slice_columns: str = "",
    positive_class: str = "",
    comparison_metric: str = "accuracy",
    regression_tolerance: float = 0.0,
    thresholds: str = "",
) -> Evaluation:
    """Score ``model_dir`` (and the registry's champion) on the test split, and decide.

    Without ``registry_uri`` and ``model_name`` no champion is looked up.
    """
    policy = BlessingPolicy.from_parameters(min_accuracy, thresholds, comparison_metric,
                                            regression_tolerance)
    model = ExportedModel(model_dir)
    labels = schema.label_vocabulary
    if len(model.label_vocabulary) != len(labels):
        raise EvaluationError(
            f"label-count mismatch: the model was trained for {len(model.label_vocabulary)} "
            f"labels {model.label_vocabulary} but the data's schema has {len(labels)} {labels}")
    if model.label_vocabulary != labels:
        raise EvaluationError(
            f"the model was trained for labels {model.label_vocabulary} but the data's schema "
            f"has {labels}")
    test = load_split(dataset_dir, "test", schema)
    if test.empty:
        raise EvaluationError(f"the test split in {dataset_dir} has no rows")
    columns = choose_slice_columns(schema, test, slice_columns)
    true = encode_labels(test, schema)
    probabilities = model.predict_proba(to_model_inputs(test, schema))
    try:
        metrics = compute_metrics(true, probabilities, labels, positive_class)
        roc_class, roc = positive_class_roc(true, probabilities, labels, positive_class)
    except MetricsError as exc:
        raise EvaluationError(str(exc)) from exc

    champion = None
    if registry_uri and model_name:
        version = find_champion(registry_uri, model_name)
        if version is not None:
            champion = score_champion(version, test, schema, true, positive_class)
    slices = slice_metrics(test, columns, true, probabilities,
                           champion.probabilities if champion else None)
    return Evaluation(
        model_name=model_name,
        metrics=metrics,
        roc_class=roc_class,
        roc=roc,
        slices=slices,
        champion=champion,
        decision=decide(metrics, champion, policy),
        policy=policy,
        data=data_summary(dataset_dir, schema, test),
    )

