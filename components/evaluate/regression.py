"""Evaluation of a regressor: RMSE, MAE, R², MAPE and residual quantiles on the test split,
the same per slice, the mean predictor as a baseline, and the gate that blesses or rejects.

The gate, by default: the model must beat the mean predictor (the train split's mean label)
on RMSE by :data:`BASELINE_MARGIN`; ``thresholds`` add absolute requirements
(``rmse<=250``, ``r2>=0.8``); against a champion, ``comparison_metric`` (RMSE unless a
regression metric is named) must not be worse by more than ``regression_tolerance``, a
fraction of the champion's value (0.01 = 1 % worse at most).
"""

from __future__ import annotations

import json
import math
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gkeflow.components.evaluate.logic import (
    choose_slice_columns,
    find_champion,
    local_model_dir,
)
from gkeflow.components.evaluate.policy import (
    Champion,
    Check,
    Decision,
    EvaluationError,
    Threshold,
    parse_thresholds,
)
from gkeflow.components.evaluate.slices import AUTO_SLICE_MAX_VALUES
from gkeflow.components.prepare.finish import train_column_stats
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.reservoir import Reservoir
from gkeflow.components.train.exported import ExportedModel

REGRESSION_METRICS = ("rmse", "mae", "r2", "mape")
LOWER_IS_BETTER = frozenset({"rmse", "mae", "mape"})
#: The model's RMSE must be at most (1 - this) x the mean predictor's.
BASELINE_MARGIN = 0.05
RESIDUAL_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
#: Test rows kept for the predicted-vs-actual plot (the split's rows are hash-ordered).
PLOT_POINTS = 1000
#: Most residuals kept for their quantiles and histogram: beyond it, a uniform sample
#: (reservoir sampling, fixed seed), so memory stays bounded on any test split.
RESIDUAL_SAMPLE = 1_000_000


def parse_regression_thresholds(text: str) -> list[Threshold]:
    """``"rmse<=250, r2>=0.8"`` -> thresholds over :data:`REGRESSION_METRICS`."""
    return parse_thresholds(text, REGRESSION_METRICS, "regression", "rmse<=250")


@dataclass(frozen=True)
class RegressionPolicy:
    """When a regressor is blessed (see the module docstring)."""

    thresholds: tuple[Threshold, ...] = ()
    comparison_metric: str = "rmse"
    regression_tolerance: float = 0.01
    baseline_margin: float = BASELINE_MARGIN
    min_accuracy: float = 0.0  # not used by regression; kept for what reports the policy

    @classmethod
    def from_parameters(cls, thresholds: str = "", comparison_metric: str = "",
                        regression_tolerance: float = 0.01,
                        baseline_margin: float = BASELINE_MARGIN) -> RegressionPolicy:
        metric = comparison_metric if comparison_metric in REGRESSION_METRICS else "rmse"
        if not (math.isfinite(regression_tolerance) and regression_tolerance >= 0):
            raise EvaluationError(f"regression_tolerance must be a finite number >= 0; got "
                                  f"{regression_tolerance}")
        if not (math.isfinite(baseline_margin) and 0 <= baseline_margin < 1):
            raise EvaluationError(f"baseline_margin must be in [0, 1) (0.05: RMSE 5% below "
                                  f"the mean predictor's); got {baseline_margin}")
        return cls(tuple(parse_regression_thresholds(thresholds)), metric,
                   regression_tolerance, float(baseline_margin))


class RegressionAccumulator:
    """Sums for RMSE, MAE, R² and MAPE (exact, over every row), the residuals (quantiles,
    histogram: every residual up to ``sample_size``, a uniform sample of them beyond) and the
    first rows' (actual, predicted) pairs, streamed batch by batch."""

    def __init__(self, baseline: float, sample_size: int = RESIDUAL_SAMPLE):
        self.baseline = baseline
        self.sample_size = sample_size
        self._residuals = Reservoir(sample_size)
        self.n = 0
        self.sse = self.sae = self.sum_y = self.sum_y2 = self.base_sse = self.base_sae = 0.0
        self.ape = 0.0
        self.zero_labels = 0
        self.pairs: list[tuple[float, float]] = []

    def update(self, actual: np.ndarray, predicted: np.ndarray) -> None:
        actual = np.asarray(actual, np.float64).reshape(-1)
        predicted = np.asarray(predicted, np.float64).reshape(-1)
        if not np.all(np.isfinite(predicted)):
            raise EvaluationError("the model predicted a non-finite value (inf or NaN) for "
                                  f"{int(np.count_nonzero(~np.isfinite(predicted)))} test rows")
        error = predicted - actual
        self.n += actual.size
        self.sse += float(np.sum(error ** 2))
        self.sae += float(np.sum(np.abs(error)))
        self.sum_y += float(np.sum(actual))
        self.sum_y2 += float(np.sum(actual ** 2))
        self.base_sse += float(np.sum((self.baseline - actual) ** 2))
        self.base_sae += float(np.sum(np.abs(self.baseline - actual)))
        nonzero = actual != 0
        self.zero_labels += int(actual.size - np.count_nonzero(nonzero))
        self.ape += float(np.sum(np.abs(error[nonzero] / actual[nonzero])))
        self._residuals.add(error)
        room = PLOT_POINTS - len(self.pairs)
        if room > 0:
            self.pairs += list(zip(actual[:room].tolist(), predicted[:room].tolist(),
                                   strict=True))

    def metrics(self) -> dict[str, float | None]:
        if not self.n:
            return {name: None for name in REGRESSION_METRICS}
        sst = self.sum_y2 - self.sum_y ** 2 / self.n
        return {"rmse": math.sqrt(self.sse / self.n), "mae": self.sae / self.n,
                "r2": 1.0 - self.sse / sst if sst > 0 else None,
                "mape": self.ape / self.n if not self.zero_labels else None}

    def baseline_metrics(self) -> dict[str, float | None]:
        if not self.n:
            return {"rmse": None, "mae": None}
        return {"rmse": math.sqrt(self.base_sse / self.n), "mae": self.base_sae / self.n,
                "prediction": self.baseline}

    @property
    def residuals_sampled(self) -> bool:
        """Whether the quantiles and histogram come from a sample of the residuals."""
        return self._residuals.sampled

    def residual_quantiles(self) -> dict[str, float]:
        if not self._residuals.values.size:
            return {}
        return {f"p{round(q * 100)}": float(np.quantile(self._residuals.values, q))
                for q in RESIDUAL_QUANTILES}

    def histogram(self, bins: int = 30) -> tuple[list[int], list[float]]:
        if not self._residuals.values.size:
            return [], []
        counts, edges = np.histogram(self._residuals.values, bins=bins)
        return counts.tolist(), edges.tolist()


@dataclass
class SliceErrors:
    """RMSE and MAE of one slice value."""

    column: str
    value: str
    examples: int
    rmse: float
    mae: float


@dataclass
class RegressionEvaluation:
    """What the regression evaluation found: the evidence behind the decision."""

    model_name: str
    metrics: dict[str, float | None]
    baseline: dict[str, float | None]
    residual_quantiles: dict[str, float]
    slices: list[SliceErrors]
    champion: Champion | None
    champion_metrics: dict[str, float | None] | None
    decision: Decision
    policy: RegressionPolicy
    data: dict[str, Any]
    pairs: list[tuple[float, float]] = field(default_factory=list)
    histogram: tuple[list[int], list[float]] = ((), ())
    #: The first test rows and the model's values for them (what serving must answer).
    sample: dict[str, Any] | None = None
    task: str = "regression"

    @property
    def passed(self) -> bool:
        return self.decision.blessed

    def scalar_metrics(self) -> dict[str, float]:
        """Overall, baseline, residual and per-slice metrics, all finite."""
        values = {name: v for name, v in self.metrics.items() if v is not None}
        values.update({f"baseline_{k}": v for k, v in self.baseline.items()
                       if v is not None and k != "prediction"})
        values.update({f"residual_{k}": v for k, v in self.residual_quantiles.items()})
        values["examples"] = float(self.data.get("test_rows", 0))
        for s in self.slices:
            key = re.sub(r"[^a-z0-9]+", "_", f"slice_{s.column}_{s.value}".lower()).strip("_")
            values[f"{key}_rmse"] = s.rmse
        return values

    def to_dict(self) -> dict[str, Any]:
        champion = None
        if self.champion is not None:
            champion = {"name": self.champion.name, "version": self.champion.version,
                        "uri": self.champion.uri, "aliases": list(self.champion.aliases),
                        "not_comparable": self.champion.not_comparable,
                        "metrics": self.champion_metrics}
        return {"task": "regression", "model_name": self.model_name,
                "blessed": self.decision.blessed, "reasons": self.decision.reasons,
                "checks": [vars(c) for c in self.decision.checks],
                "policy": {"thresholds": [str(t) for t in self.policy.thresholds],
                           "comparison_metric": self.policy.comparison_metric,
                           "regression_tolerance": self.policy.regression_tolerance,
                           "baseline_margin": self.policy.baseline_margin},
                "data": self.data, "metrics": self.metrics, "baseline": self.baseline,
                "residual_quantiles": self.residual_quantiles, "champion": champion,
                "slices": [asdict(s) for s in self.slices],
                "sample_predictions": self.sample}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def decide_regression(metrics: dict, baseline: dict, champion: Champion | None,
                      champion_metrics: dict | None, policy: RegressionPolicy) -> Decision:
    """Bless when the model beats the mean predictor, meets every threshold and is not
    worse than the champion beyond the tolerance."""
    rmse, base = metrics.get("rmse"), baseline.get("rmse")
    limit = None if base is None else (1 - policy.baseline_margin) * base
    ok = rmse is not None and limit is not None and (rmse <= limit or base == 0)
    checks = [Check("baseline", ok,
                    f"rmse {_fmt(rmse)} {'<=' if ok else '>'} {_fmt(limit)} (the mean "
                    f"predictor's {_fmt(base)} less {policy.baseline_margin * 100:g}%"
                    + ("" if ok else "; baseline_margin sets the margin") + ")")]
    for threshold in policy.thresholds:
        actual = metrics.get(threshold.metric)
        holds = threshold.holds(actual)
        checks.append(Check(f"threshold {threshold}", holds,
                            f"{threshold.metric} {_fmt(actual)} "
                            f"{'meets' if holds else 'misses'} {threshold}"
                            + (" (undefined on this test split)" if actual is None else "")))
    metric = policy.comparison_metric
    if champion is None:
        checks.append(Check("champion", True, "no champion registered: the baseline and "
                                              "thresholds decide"))
    elif champion_metrics is None:
        checks.append(Check("champion", True, f"champion {champion.label} is not comparable "
                                              f"({champion.not_comparable})"))
    else:
        mine, theirs = metrics.get(metric), champion_metrics.get(metric)
        if mine is None or theirs is None:
            checks.append(Check("champion", False, f"{metric} is undefined on this test split "
                                                   f"(challenger {_fmt(mine)}, champion "
                                                   f"{_fmt(theirs)})"))
        else:
            lower = metric in LOWER_IS_BETTER
            worse = (mine - theirs) if lower else (theirs - mine)
            allowed = policy.regression_tolerance * abs(theirs)
            fine = worse <= allowed + 1e-12
            checks.append(Check("champion", fine,
                                f"{metric} {_fmt(mine)} vs champion {champion.label} "
                                f"{_fmt(theirs)} ({'lower' if lower else 'higher'} is better): "
                                + ("no worse" if worse <= 0 else
                                   f"worse by {_fmt(worse)}, "
                                   f"{'within' if fine else 'beyond'} the tolerance "
                                   f"{policy.regression_tolerance:.0%} of the champion's")))
    return Decision(blessed=all(c.ok for c in checks), checks=checks)


def _train_mean(dataset_dir: Path, label: str) -> float | None:
    return (train_column_stats(dataset_dir, label) or {}).get("mean")


def evaluate_regression(dataset_dir: Path, schema: Schema, model_dir: Path, *,
                        model_name: str = "", registry_uri: str = "", slice_columns: str = "",
                        comparison_metric: str = "", regression_tolerance: float = 0.01,
                        thresholds: str = "", batch_rows: int = 0,
                        baseline_margin: float = BASELINE_MARGIN) -> RegressionEvaluation:
    """Score ``model_dir`` (and a comparable champion) on the test split, and decide."""
    from gkeflow.components.evaluate.stream import (
        EVAL_BATCH_ROWS,
        iter_test_batches,
        model_inputs,
        prediction_sample,
    )

    policy = RegressionPolicy.from_parameters(thresholds, comparison_metric,
                                              regression_tolerance, baseline_margin)
    model = ExportedModel(model_dir)
    if not model.regression:
        raise EvaluationError("the model is a classifier but the data's label is a number "
                              "to predict (task regression); train it with --task regression")
    columns, auto = choose_slice_columns(schema, slice_columns)
    mean = _train_mean(dataset_dir, schema.label)
    challenger = champion_acc = None
    slices: dict[str, dict[str, list[float]]] = {c: {} for c in columns}
    champion, champion_model, sample = None, None, None
    with tempfile.TemporaryDirectory(prefix="gkeflow-champion-") as scratch:
        if registry_uri and model_name:
            version = find_champion(registry_uri, model_name)
            if version is not None:
                champion, champion_model = _open_champion(version, schema, Path(scratch))
        for batch in iter_test_batches(dataset_dir, schema, batch_rows or EVAL_BATCH_ROWS):
            actual = np.asarray(batch[schema.label], np.float64)
            if challenger is None:
                base = mean if mean is not None else float(np.mean(actual))
                challenger, champion_acc = RegressionAccumulator(base), RegressionAccumulator(base)
            predicted = model.predict_values(model_inputs(model.metadata["features"], batch))
            if sample is None:
                sample = prediction_sample(model.metadata["features"], batch,
                                           predicted.reshape(-1, 1), [])
            challenger.update(actual, predicted)
            if champion_model is not None:
                champion_acc.update(actual, champion_model.predict_values(
                    model_inputs(champion_model.metadata["features"], batch)))
            _slice_update(slices, batch, actual, predicted)
    if challenger is None or not challenger.n:
        raise EvaluationError(f"the test split in {dataset_dir} has no rows")
    metrics, baseline = challenger.metrics(), challenger.baseline_metrics()
    champion_metrics = champion_acc.metrics() if champion_model is not None else None
    return RegressionEvaluation(
        model_name=model_name, metrics=metrics, baseline=baseline,
        residual_quantiles=challenger.residual_quantiles(),
        slices=_slice_result(slices, auto), champion=champion,
        champion_metrics=champion_metrics,
        decision=decide_regression(metrics, baseline, champion, champion_metrics, policy),
        policy=policy,
        data={"label": schema.label, "test_rows": challenger.n,
              "residuals_sampled": (challenger.sample_size if challenger.residuals_sampled
                                    else 0),
              "features": [{"name": c.name, "type": c.type} for c in schema.features],
              "label_transform": (model.metadata.get("label_scaling") or {}).get("transform")},
        pairs=challenger.pairs, histogram=challenger.histogram(), sample=sample)


def _open_champion(version, schema: Schema, scratch: Path):
    champion = Champion(name=version.name, version=int(version.version), uri=version.uri,
                        aliases=tuple(version.aliases))
    try:
        model = ExportedModel(local_model_dir(version.uri, scratch))
    except (FileNotFoundError, OSError) as exc:
        raise EvaluationError(f"champion {champion.label} cannot be loaded from "
                              f"{version.uri}: {exc}") from exc
    if not model.regression:
        champion.not_comparable = "it is a classifier"
        return champion, None
    missing = sorted({f["name"] for f in model.metadata["features"]}
                     - {c.name for c in schema.features})
    if missing:
        champion.not_comparable = f"it needs features this data lacks: {', '.join(missing)}"
        return champion, None
    return champion, model


def _slice_update(slices: dict, batch: dict, actual: np.ndarray,
                  predicted: np.ndarray) -> None:
    error = np.asarray(predicted, np.float64) - actual
    for column, values in slices.items():
        keys, index = np.unique(np.asarray(batch[column], dtype=object), return_inverse=True)
        index = index.reshape(-1)
        counts = np.bincount(index, minlength=len(keys))
        sse = np.bincount(index, weights=error ** 2, minlength=len(keys))
        sae = np.bincount(index, weights=np.abs(error), minlength=len(keys))
        for i, key in enumerate(keys):
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            sums = values.setdefault(name, [0, 0.0, 0.0])
            sums[0] += int(counts[i])
            sums[1] += float(sse[i])
            sums[2] += float(sae[i])


def _slice_result(slices: dict, auto: bool) -> list[SliceErrors]:
    out = []
    for column, values in slices.items():
        if auto and len(values) > AUTO_SLICE_MAX_VALUES:
            continue
        for value, (n, sse, sae) in sorted(values.items()):
            out.append(SliceErrors(column, value or "(missing)", n, math.sqrt(sse / n),
                                   sae / n))
    return out


__all__ = ["BASELINE_MARGIN", "REGRESSION_METRICS", "RegressionAccumulator",
           "RegressionEvaluation", "RegressionPolicy", "SliceErrors", "decide_regression",
           "evaluate_regression", "parse_regression_thresholds"]
