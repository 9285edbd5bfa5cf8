"""Evaluation: score the challenger (and the registry's champion) on the test split, decide.

:func:`evaluate` loads the new model, computes its metrics, slices them by chosen
categorical columns, looks up the current champion of ``model_name`` in the registry,
scores it on the very same test split, and blesses the challenger only when it meets
the absolute thresholds and does not regress beyond a tolerance on the comparison
metric. Everything it found is in the returned :class:`Evaluation`.

The gate itself (thresholds, the blessing policy, the decision) is ``policy``.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gkeflow.components.evaluate.metrics import (
    MAX_CURVE_POINTS,
    Curve,
    MetricsError,
    MetricSet,
    downsample_curve,
    metric_key,
)
from gkeflow.components.evaluate.policy import (
    BlessingPolicy,
    Champion,
    Decision,
    EvaluationError,
    decide,
)
from gkeflow.components.evaluate.slices import SliceAccumulator, SliceMetrics, as_keys
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.exported import ExportedModel

# ---------------------------------------------------------------------------------------------
# Slices


def choose_slice_columns(schema: Schema, requested: str) -> tuple[list[str], bool]:
    """The columns to slice by and whether they were chosen automatically: ``requested``
    (comma-separated) checked against the schema, or, when empty, every categorical feature
    (those with more than AUTO_SLICE_MAX_VALUES values in the test split are dropped while
    it streams)."""
    categorical = [c.name for c in schema.features if c.type == "categorical"]
    names = [n.strip() for n in (requested or "").split(",") if n.strip()]
    if not names:
        return categorical, True
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
    return list(dict.fromkeys(names)), False


def slice_metrics(test, columns: list[str], true: np.ndarray, probabilities: np.ndarray,
                  champion_probabilities: np.ndarray | None = None) -> list[SliceMetrics]:
    """Accuracy, macro F1 (over the classes seen in the slice) and log loss per slice value
    of in-memory data (a DataFrame ``test``), as the streamed evaluation computes them."""
    slices = SliceAccumulator(columns, probabilities.shape[1])
    slices.update({c: as_keys(test[c].tolist()) for c in columns}, true,
                  np.asarray(probabilities).argmax(axis=1), probabilities,
                  None if champion_probabilities is None
                  else np.asarray(champion_probabilities).argmax(axis=1))
    return slices.result()


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


def open_champion(version, schema: Schema, scratch: Path
                  ) -> tuple[Champion, ExportedModel | None, list[int]]:
    """Load the champion's model from its URI (into ``scratch`` if it must be copied).

    Returns the champion, its model (None when it cannot score this data: the reason is
    in ``not_comparable``) and, for each of the schema's labels, the champion's class index.
    """
    champion = Champion(name=version.name, version=int(version.version), uri=version.uri,
                        aliases=tuple(version.aliases))
    model_dir = local_model_dir(version.uri, scratch)
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
        return champion, None, []
    missing = sorted({f["name"] for f in model.metadata["features"]}
                     - {c.name for c in schema.features})
    if missing:
        champion.not_comparable = f"it needs features this data lacks: {', '.join(missing)}"
        return champion, None, []
    return champion, model, [model.label_vocabulary.index(label) for label in labels]


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
    #: The first test rows and the model's probabilities for them (stream.prediction_sample).
    sample: dict[str, Any] | None = None

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
                # ROC/PR AUCs come from bounded score histograms: how far they may be off
                "auc_error_bound": dict(m.auc_error_bound),
                "curves_exact": m.curves_exact,
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
            "sample_predictions": self.sample,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def data_summary(dataset_dir: Path, schema: Schema, metrics: MetricSet) -> dict[str, Any]:
    """Rows per split, the features and the class distribution of the test split."""
    rows: dict[str, int] = {}
    stats_path = Path(dataset_dir) / "stats.json"
    if stats_path.exists():  # what prepare_data counted
        recorded = json.loads(stats_path.read_text(encoding="utf-8"))
        rows = {split: int(n) for split, n in recorded.get("split_rows", {}).items()}
        rows["rejected"] = int(recorded.get("rejected_rows", 0))
    else:
        rows["test"] = metrics.examples
    counts = np.asarray(metrics.confusion_matrix).sum(axis=1)
    return {
        "label": schema.label,
        "rows": rows,
        "features": [{"name": c.name, "type": c.type} for c in schema.features],
        "test_class_counts": {label: int(counts[i])
                              for i, label in enumerate(schema.label_vocabulary)},
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
    batch_rows: int = 0,
) -> Evaluation:
    """Score ``model_dir`` (and the registry's champion) on the test split, and decide.

    The test split is streamed once, in batches of ``batch_rows`` (default
    ``stream.EVAL_BATCH_ROWS``), through both models; every metric is accumulated, so
    memory does not grow with the split (see ``accumulate``, ``scores``, ``slices``).
    Without ``registry_uri`` and ``model_name`` no champion is looked up.
    """
    from gkeflow.components.evaluate.stream import (
        EVAL_BATCH_ROWS,
        LabelError,
        score_test_split,
    )

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
    try:
        from gkeflow.components.evaluate.metrics import resolve_positive_class

        resolve_positive_class(labels, positive_class)
    except MetricsError as exc:
        raise EvaluationError(str(exc)) from exc
    columns, auto = choose_slice_columns(schema, slice_columns)
    slices = SliceAccumulator(columns, len(labels), auto=auto)

    champion, champion_model, order = None, None, []
    with tempfile.TemporaryDirectory(prefix="gkeflow-champion-") as scratch:
        if registry_uri and model_name:
            version = find_champion(registry_uri, model_name)
            if version is not None:
                champion, champion_model, order = open_champion(version, schema, Path(scratch))
        try:
            scored = score_test_split(dataset_dir, schema, model, slices, champion_model,
                                      order, batch_rows or EVAL_BATCH_ROWS)
        except (LabelError, MetricsError) as exc:
            raise EvaluationError(str(exc)) from exc
    if not scored.challenger.examples:
        raise EvaluationError(f"the test split in {dataset_dir} has no rows")
    metrics = scored.challenger.result(positive_class)
    roc_class, roc = scored.challenger.roc(positive_class)
    if champion is not None and scored.champion is not None:
        champion.metrics = scored.champion.result(positive_class)
    return Evaluation(
        model_name=model_name,
        metrics=metrics,
        roc_class=roc_class,
        roc=downsample_curve(roc, MAX_CURVE_POINTS),
        slices=scored.slices.result(),
        champion=champion,
        decision=decide(metrics, champion, policy),
        policy=policy,
        data=data_summary(dataset_dir, schema, metrics),
        sample=scored.sample,
    )
