"""One candidate of ``model_type: auto`` trained into its own folder, and the choice among
several such folders: the best on the eval split (or their ensemble) published as the model.

The same code serves the candidates trained one after the other inside ``train-model`` and
the candidates trained as parallel pipeline tasks (``train-gbdt``, ``train-mlp``, ...) whose
folders ``train-model`` then reads. A candidate's folder holds::

    candidate.json        family, status (succeeded, failed, skipped), the reason, the result
    model/                its raw-feature SavedModel (succeeded only)
    eval_predictions.npy  its eval-split predictions, when its fit never saw the eval rows
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import fields, replace
from pathlib import Path

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.progress import say
from gkeflow.components.train.params import TrainParams, TrainResult

CANDIDATE_FILE = "candidate.json"
PREDICTIONS_FILE = "eval_predictions.npy"
MODEL_FOLDER = "model"


class NoCandidateTrained(RuntimeError):
    """Every candidate of ``model_type: auto`` failed (or none was asked for)."""


def fatal_errors() -> tuple[type[BaseException], ...]:
    """Errors no candidate can escape: a preemption (the retry resumes), and a host or data
    that cannot train as asked (no GPU where one was required, a log transform of a label
    below zero): the step fails at once, in one line, as for one family."""
    from gkeflow.components.train.backend import BackendError
    from gkeflow.components.train.devices import GpuUnavailableError
    from gkeflow.components.train.preemption import Preempted
    from gkeflow.components.train.regression import LabelTransformError

    return (Preempted, GpuUnavailableError, LabelTransformError, BackendError)


def deciding_metric(schema: Schema, label_transform: str) -> str:
    """The eval metric that picks the winner (lower is better)."""
    if not schema.regression:
        return "eval_loss"
    return "eval_rmse_log" if label_transform == "log" else "eval_rmse"


def candidate_params(params: TrainParams, name: str) -> TrainParams:
    """``params`` as candidate ``name`` trains with (``user``: the user's module)."""
    if params.model_type != "auto":
        return params  # one family, as asked
    if name == "user":
        return replace(params, model_type="mlp")  # the user's module decides the model
    return replace(params, model_type=name, user_module="")


def _write(folder: Path, entry: dict) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CANDIDATE_FILE).write_text(json.dumps(entry, indent=2))
    return entry


def record_skipped(folder: Path, family: str, reason: str) -> dict:
    """A candidate this run does not train, and why."""
    return _write(folder, {"family": family, "status": "skipped", "reason": reason})


def train_into(folder: Path, family: str, metric: str, train_one, dataset_dir: Path,
               schema: Schema, params: TrainParams, **train_arguments) -> dict:
    """Train ``family`` with ``train_one`` (:func:`~gkeflow.components.train.logic.train`)
    into ``folder``; its entry (status, the deciding metric, seconds). A failure other than
    :func:`fatal_errors` is recorded, not raised: another candidate may still win."""
    started = time.perf_counter()
    try:
        result = train_one(Path(dataset_dir), schema, folder / MODEL_FOLDER,
                           candidate_params(params, family), **train_arguments)
    except Exception as exc:  # noqa: BLE001 - another candidate may still win
        if isinstance(exc, fatal_errors()):
            raise
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        say(f"candidate {family} failed ({type(exc).__name__}: {line}); the others go on")
        return _write(folder, {"family": family, "status": "failed",
                               "error": f"{type(exc).__name__}: {line}"})
    seconds = round(time.perf_counter() - started, 1)
    value = result.metrics.get(metric)
    if value is None:  # no eval rows: the train split's figure
        value = result.metrics.get(metric.replace("eval_", "train_"))
    say(f"candidate {family}: {metric} {value:.4g} in {seconds:.0f} s" if value is not None
        else f"candidate {family}: done in {seconds:.0f} s")
    held_out = result.eval_predictions
    if held_out is None and params.ensemble:  # a Keras model, never fitted on the eval rows
        held_out = served_eval_predictions(folder / MODEL_FOLDER, Path(dataset_dir), schema)
    if held_out is not None:  # for the ensemble, without loading the model again
        import numpy as np

        np.save(folder / PREDICTIONS_FILE, np.asarray(held_out))
    kept = {f.name: getattr(result, f.name) for f in fields(TrainResult)
            if f.name not in ("gpu_utilisation", "eval_predictions")}
    return _write(folder, {
        "family": family, "status": "succeeded", metric: value, "seconds": seconds,
        **{k: v for k, v in result.metrics.items() if k.startswith(("eval_", "train_"))},
        "result": json.loads(json.dumps(kept, default=float)),
        "gpu_utilisation": (result.gpu_utilisation.summary_line()
                            if result.gpu_utilisation else "")})


def served_eval_predictions(model_dir: Path, dataset_dir: Path, schema: Schema):
    """The eval split's predictions as ``model_dir``'s SavedModel serves them (its serving
    function in memory when this process exported it); None without eval rows."""
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import split_rows, to_model_inputs

    if not split_rows(dataset_dir).get("eval"):
        return None
    frame = load_split(dataset_dir, "eval", schema)
    return ExportedModel(model_dir, written_here=True).predict_proba(
        to_model_inputs(frame, schema))


def read_candidate(folder: Path) -> tuple[dict, TrainResult | None]:
    """A candidate folder's entry and, when it trained, its result."""
    path = Path(folder) / CANDIDATE_FILE
    if not path.is_file():
        return {"status": "failed", "error": "its task wrote no candidate.json"}, None
    entry = json.loads(path.read_text())
    if entry.get("status") != "succeeded":
        return entry, None
    result = TrainResult(**entry["result"])
    predictions = Path(folder) / PREDICTIONS_FILE
    if predictions.is_file():
        import numpy as np

        result = replace(result, eval_predictions=np.load(predictions))
    return entry, result


def asked_any(folders: dict[str, Path]) -> bool:
    """Whether the run asked any of these candidates to train (trained or failed)."""
    return any(read_candidate(folder)[0].get("status") != "skipped"
               for folder in folders.values())


def choose(dataset_dir: Path, schema: Schema, model_dir: Path, params: TrainParams,
           folders: dict[str, Path], left_out: list[str] | None = None) -> TrainResult:
    """Publish into ``model_dir`` the best candidate of ``folders`` on the eval split (or
    their greedy ensemble when it is better still) and return its result, with every
    candidate's eval metric and the reason of the choice in its metrics and metadata.

    Raises:
        NoCandidateTrained: no candidate succeeded.
    """
    from gkeflow.components._atomic import publish_dir
    from gkeflow.components.train.exported import MODEL_METADATA_FILE

    metric = deciding_metric(schema, params.label_transform)
    report: dict[str, dict] = {}
    results: dict[str, TrainResult] = {}
    for name, folder in folders.items():
        entry, result = read_candidate(folder)
        if entry.get("status") == "skipped":
            continue
        report[name] = {k: v for k, v in entry.items() if k not in ("result", "family")}
        if result is not None:
            results[name] = result
    if not results:
        if not report:
            raise NoCandidateTrained(
                f"no candidate was asked to train (model_type {params.model_type}, "
                f"candidates {params.candidates or 'default'}; this pipeline has tasks for "
                f"{', '.join(folders)}): compile it for these settings (gkeflow.yaml "
                "candidates: or --model-type) or choose among its candidates")
        raise NoCandidateTrained("model_type auto: every candidate failed ("
                                 + "; ".join(f"{k}: {v.get('error', v.get('status'))}"
                                             for k, v in report.items()) + ")")
    names = list(report)
    if params.model_type != "auto" and len(results) == 1:  # one family, as asked
        (name, result), = results.items()
        with publish_dir(Path(model_dir)) as published:
            shutil.copytree(folders[name] / MODEL_FOLDER, published, dirs_exist_ok=True)
        return result
    winner = min(results, key=lambda n: (report[n][metric]
                                         if report[n].get(metric) is not None else float("inf"),
                                         names.index(n)))
    shown = ", ".join(f"{n} {report[n][metric]:.4f}" if report[n].get(metric) is not None
                      else f"{n} failed" for n in names)
    reason = f"lowest {metric} on the eval split ({shown})"
    blend = choose_ensemble(Path(dataset_dir), schema, params, results, folders)
    metadata = json.loads((folders[winner] / MODEL_FOLDER / MODEL_METADATA_FILE).read_text())
    chosen = winner
    if blend is not None:
        weights, value, close = blend
        chosen = "ensemble of " + ", ".join(f"{n} {w:.2f}" for n, w in weights.items())
        reason = (f"the eval split cannot tell {' and '.join(weights)} apart ({shown}: each "
                  f"within one standard error of the best), so their average serves "
                  f"({metric} {value:.4f})" if close else
                  f"its {metric} on the eval split, {value:.4f}, beats the best single "
                  f"candidate's ({shown})")
        metadata.update({"model_family": "ensemble", "ensemble": weights, "model": "ensemble"})
    say(f"model auto: {chosen} wins: {reason}")
    metadata.update({"model_selection": {"chosen": chosen, "metric": metric, "reason": reason,
                                         "candidates": report, "left_out": left_out or []}})
    if blend is not None:
        from gkeflow.components.train.ensemble import export_ensemble

        export_ensemble(Path(model_dir), {n: folders[n] / MODEL_FOLDER for n in blend[0]},
                        blend[0], metadata)
    else:
        with publish_dir(Path(model_dir)) as published:
            shutil.copytree(folders[winner] / MODEL_FOLDER, published, dirs_exist_ok=True)
            (published / MODEL_METADATA_FILE).write_text(json.dumps(metadata, indent=2))
    best = results[winner]
    metrics = dict(best.metrics)
    for name, entry in report.items():
        if entry.get(metric) is not None:
            metrics[f"candidate_{name}_{metric}"] = float(entry[metric])
    if blend is not None:
        metrics[metric] = blend[1]
        return replace(best, metrics=metrics,
                       strategy=f"auto: {chosen}; candidates {', '.join(names)}")
    return replace(best, metrics=metrics,
                   strategy=f"auto: {winner} ({best.strategy}); candidates {', '.join(names)}")


def choose_ensemble(dataset_dir: Path, schema: Schema, params: TrainParams,
                    results: dict[str, TrainResult], folders: dict[str, Path]):
    """(weights, eval error, close) of the candidates' blend: the equal average of those the
    eval split cannot tell apart (``close`` True), else the greedy ensemble when it beats
    the best single candidate by :data:`~.ensemble.MIN_GAIN`; None for neither."""
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.ensemble import (
        MIN_GAIN,
        blend,
        eval_error,
        greedy_weights,
        indistinguishable,
    )
    from gkeflow.components.train.inputs import encode_labels, split_rows

    if len(results) < 2 or not params.ensemble or not split_rows(dataset_dir).get("eval"):
        return None
    frame = load_split(dataset_dir, "eval", schema)
    truth = (frame[schema.label].to_numpy(float) if schema.regression
             else encode_labels(frame, schema))
    predictions = {}
    for name, result in results.items():
        held_out = result.eval_predictions
        if held_out is None:  # a Keras model: trained on the train split only
            held_out = served_eval_predictions(folders[name] / MODEL_FOLDER, dataset_dir,
                                               schema)
        predictions[name] = held_out
    close = indistinguishable(predictions, truth, schema.regression, params.label_transform)
    if len(close) > 1:
        weights = {name: 1 / len(close) for name in close}
        return weights, eval_error(blend(predictions, weights), truth, schema.regression,
                                   params.label_transform), True
    single = min(eval_error(p, truth, schema.regression, params.label_transform)
                 for p in predictions.values())
    weights, value = greedy_weights(predictions, truth, schema.regression,
                                    params.label_transform)
    if len(weights) < 2 or not value < single * (1 - MIN_GAIN):
        return None
    return weights, value, False
