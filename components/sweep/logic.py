"""Trial outcomes of a sweep, the choice of the best trial and the trial table.

Plain functions over JSON values: the KFP step (``select_best_trial``), the Vertex AI
tuning step and ``gkeflow run --pipeline sweep`` all use them, so every engine picks the
same winner from the same results.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The file a sweep's winning model carries: its trial, hyperparameters and the trial table.
SWEEP_FILE = "sweep.json"


class NoSuccessfulTrial(RuntimeError):
    """Every trial failed (or reported no metric): there is nothing to select."""


@dataclass
class TrialOutcome:
    """One trial: its hyperparameters and what training reported."""

    trial_id: str
    hyperparameters: dict[str, Any]
    status: str = "missing"
    metrics: dict[str, float] = field(default_factory=dict)
    model_uri: str = ""
    error: str = ""

    def value(self, metric: str) -> float | None:
        value = self.metrics.get(metric)
        if self.status != "succeeded" or value is None:
            return None
        value = float(value)
        return value if math.isfinite(value) else None


def parse_outcomes(trials: Sequence[Mapping[str, Any]],
                   reports: Iterable[str | Mapping[str, Any] | None]) -> list[TrialOutcome]:
    """Join the trial list with the reports trials returned (in any order, some missing)."""
    by_id: dict[str, dict] = {}
    for report in reports:
        if report in (None, ""):
            continue
        data = json.loads(report) if isinstance(report, str) else dict(report)
        by_id[str(data.get("trial_id", ""))] = data
    outcomes = []
    for trial in trials:
        trial_id = str(trial["trial_id"])
        params = {k: _typed(k, v) for k, v in trial.items() if k != "trial_id"}
        data = by_id.get(trial_id)
        if data is None:
            outcomes.append(TrialOutcome(trial_id, params, "missing",
                                         error="the trial reported no result"))
            continue
        outcomes.append(TrialOutcome(
            trial_id, params, str(data.get("status", "failed")),
            {k: float(v) for k, v in (data.get("metrics") or {}).items()},
            str(data.get("model_uri", "")), str(data.get("error", ""))))
    return outcomes


def _typed(name: str, value: Any) -> Any:
    """Integer hyperparameters back as ints (pipeline specs carry every number as a double)."""
    from gkeflow.components.sweep.hparams import TUNABLE_DEFAULTS

    if isinstance(TUNABLE_DEFAULTS.get(name), int) and isinstance(value, float) \
            and value.is_integer():
        return int(value)
    return value


def _sort_key(outcome: TrialOutcome, metric: str, direction: str):
    value = outcome.value(metric)
    if value is None:
        return (1, 0.0, outcome.trial_id)
    return (0, -value if direction == "maximize" else value, outcome.trial_id)


def rank(outcomes: Sequence[TrialOutcome], metric: str, direction: str) -> list[TrialOutcome]:
    """Best first; ties go to the lower trial id; failed trials last, by trial id."""
    if direction not in ("maximize", "minimize"):
        raise ValueError(f"direction must be maximize or minimize, not {direction!r}")
    return sorted(outcomes, key=lambda o: _sort_key(o, metric, direction))


def select_best(outcomes: Sequence[TrialOutcome], metric: str,
                direction: str) -> TrialOutcome:
    """The best trial on ``metric``; raises :class:`NoSuccessfulTrial` when none succeeded."""
    ranked = rank(outcomes, metric, direction)
    if not ranked or ranked[0].value(metric) is None:
        details = "; ".join(f"{o.trial_id}: {_last_line(o.error) or o.status}"
                            for o in outcomes) or "no trials"
        raise NoSuccessfulTrial(f"every trial failed, nothing to select ({details})")
    return ranked[0]


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Killed)\b:?")


def _last_line(text: str) -> str:
    """A trial's error in one line: the last line naming an exception (``ValueError: ...``,
    which a traceback ends with, before any further lines of a long message), else the
    first line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    named = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return named[-1] if named else (lines[0] if lines else "")


def trial_table(outcomes: Sequence[TrialOutcome], metric: str, direction: str,
                tuned: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows sorted best first: rank, trial, status, metric, the tuned hyperparameters."""
    tuned = list(tuned) if tuned else _varying(outcomes)
    rows = []
    for position, outcome in enumerate(rank(outcomes, metric, direction), start=1):
        value = outcome.value(metric)
        rows.append({
            "rank": position if value is not None else None,
            "trial_id": outcome.trial_id,
            "status": outcome.status,
            metric: value,
            **{name: outcome.hyperparameters.get(name) for name in tuned},
            "error": _last_line(outcome.error)[:200],
        })
    return rows


def _varying(outcomes: Sequence[TrialOutcome]) -> list[str]:
    """Hyperparameters whose value differs between trials (all of them for one trial)."""
    if not outcomes:
        return []
    names = list(outcomes[0].hyperparameters)
    varying = [n for n in names
               if len({json.dumps(o.hyperparameters.get(n)) for o in outcomes}) > 1]
    return varying or names


def table_markdown(rows: Sequence[Mapping[str, Any]], metric: str, direction: str) -> str:
    """The trial table as Markdown (the Kubeflow UI renders it)."""
    if not rows:
        return "No trials.\n"
    columns = [c for c in rows[0] if c != "error"]
    if any(r.get("error") for r in rows):
        columns.append("error")
    lines = [f"Trials sorted by {metric} ({direction}), best first.", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column)
            text = "" if value is None else (f"{value:.4f}" if isinstance(value, float)
                                             and column == metric else str(value))
            cells.append(text.replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass
class Selection:
    best: TrialOutcome
    rows: list[dict[str, Any]]
    metric: str
    direction: str

    def summary(self) -> dict[str, Any]:
        """What the winning model carries (``sweep.json``) and its artifact metadata."""
        return {
            "best_trial": self.best.trial_id,
            "metric": self.metric,
            "direction": self.direction,
            "best_value": self.best.value(self.metric),
            "hyperparameters": self.best.hyperparameters,
            "trials": self.rows,
            # a trial without a finite metric cannot be compared: it counts as failed
            "succeeded": sum(1 for r in self.rows if r["rank"] is not None),
            "failed": sum(1 for r in self.rows if r["rank"] is None),
        }


def registry_labels(selection: Selection) -> str:
    """``sweep-trial=trial-002,hp-learning_rate=0_03,...``: the winner as registry labels
    (every registry accepts them; numbers are written with '_' for '.')."""
    from gkeflow.components.register.names import sanitise_label_key, sanitise_label_value

    labels = {"sweep-trial": sanitise_label_value(selection.best.trial_id)}
    for name, value in sorted(selection.best.hyperparameters.items()):
        text = repr(value).replace(".", "_") if isinstance(value, float) else str(value)
        labels[sanitise_label_key(f"hp-{name}")[:63]] = sanitise_label_value(text)
    return ",".join(f"{k}={v}" for k, v in labels.items())


#: What trials of a regressor report in place of a classifier's metric.
REGRESSION_METRICS = {"eval_accuracy": ("eval_rmse", "minimize")}


def metric_for_task(metric: str, direction: str, regression: bool) -> tuple[str, str]:
    """The metric trials are searched on, once the data's task is known (before any trial
    runs, for engines that steer the search by it: Vizier, Ray Tune): a classifier's metric
    named for regressors becomes theirs (``eval_accuracy`` -> ``eval_rmse``, minimised)."""
    if regression and metric in REGRESSION_METRICS:
        replacement, better = REGRESSION_METRICS[metric]
        print(f"the data's task is regression: trials are searched on {replacement}, "
              f"{better}d ({metric} does not apply)")
        return replacement, better
    return metric, direction


def metric_for(outcomes: Sequence[TrialOutcome], metric: str, direction: str
               ) -> tuple[str, str]:
    """``metric`` and ``direction``, or a regressor's own when the sweep names a classifier's
    metric and the trials are regressors (they report ``eval_rmse``, no ``eval_accuracy``):
    the task is decided from the data at run time, so a compiled sweep learns it here."""
    succeeded = [o for o in outcomes if o.status == "succeeded"]
    if metric in REGRESSION_METRICS and succeeded and all(
            metric not in o.metrics for o in succeeded):
        replacement, better = REGRESSION_METRICS[metric]
        if all(replacement in o.metrics for o in succeeded):
            print(f"the trials are regressors (they report {replacement}, no {metric}): "
                  f"compared on {replacement}, {better}d")
            return replacement, better
    return metric, direction


def select(trials: Sequence[Mapping[str, Any]], reports: Iterable[Any], metric: str,
           direction: str, tuned: Sequence[str] | None = None) -> Selection:
    outcomes = parse_outcomes(trials, reports)
    metric, direction = metric_for(outcomes, metric, direction)
    best = select_best(outcomes, metric, direction)
    return Selection(best, trial_table(outcomes, metric, direction, tuned), metric, direction)


def export_best_model(selection: Selection, model_paths: Mapping[str, Path],
                      destination: Path) -> Path:
    """Copy the winner's SavedModel to ``destination`` with ``sweep.json`` beside it.

    ``model_paths`` maps a trial's model URI to where its files are readable here.
    The copy goes to a sibling directory first and is renamed into place, so a half
    copy never looks like a model.
    """
    source = model_paths.get(selection.best.model_uri)
    if source is None or not Path(source).is_dir():
        raise FileNotFoundError(f"the model of {selection.best.trial_id} "
                                f"({selection.best.model_uri}) is not readable here")
    destination = Path(destination)
    staging = destination.with_name(destination.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    (staging / SWEEP_FILE).write_text(json.dumps(selection.summary(), indent=2,
                                                 default=str) + "\n")
    if destination.exists():
        shutil.rmtree(destination)
    staging.rename(destination)
    return destination


def publish_selection(selection: Selection, model_paths: Mapping[str, Path], best_model,
                      trial_table_path: Path, **metadata: Any) -> tuple:
    """What a selecting step outputs, whichever engine ran the trials: the winner's model
    exported to ``best_model`` (an output artifact: ``.path``, ``.metadata``) with the sweep's
    metadata (plus ``metadata``), the trial table written to ``trial_table_path`` and
    printed.

    Returns:
        (best trial id, best value, hyperparameters JSON, trial rows JSON, registry labels).
    """
    from gkeflow.components._atomic import write_text_atomic

    export_best_model(selection, model_paths, Path(best_model.path))
    summary = selection.summary()
    best_model.metadata.update({
        "framework": "tensorflow",
        "sweep_best_trial": summary["best_trial"],
        "sweep_metric": selection.metric,
        "sweep_best_value": summary["best_value"],
        "hyperparameters": summary["hyperparameters"],
        "sweep_trials": summary["trials"],
        **metadata,
    })
    markdown = table_markdown(selection.rows, selection.metric, selection.direction)
    write_text_atomic(Path(trial_table_path), markdown)
    print(markdown)
    return (summary["best_trial"], float(summary["best_value"]),
            json.dumps(summary["hyperparameters"], sort_keys=True),
            json.dumps(selection.rows, default=str), registry_labels(selection))


def sweep_card_section(model_dir: Path) -> str:
    """A model card section from ``sweep.json`` in ``model_dir``; empty when absent."""
    path = Path(model_dir) / SWEEP_FILE
    if not path.is_file():
        return ""
    summary = json.loads(path.read_text())
    params = ", ".join(f"`{k}={v}`" for k, v in summary["hyperparameters"].items())
    return ("\n## Hyperparameter sweep\n\n"
            f"Best of {len(summary['trials'])} trials: **{summary['best_trial']}** "
            f"({summary['metric']} {summary['best_value']:.4f} on the eval split, "
            f"{summary['direction']}); {summary['failed']} trial(s) failed.\n\n"
            f"Hyperparameters: {params}.\n\n"
            + table_markdown(summary["trials"], summary["metric"], summary["direction"]))


def as_dict(outcome: TrialOutcome) -> dict[str, Any]:
    return asdict(outcome)
