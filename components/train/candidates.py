"""``model_type: auto``: train the candidate families on the same splits, keep the one with
the best metric on the eval split (never the test split), and export it.

The candidates are ``TrainParams.candidates`` (default gradient-boosted trees, the Keras
MLP and the linear model; ``user`` names the user's module). A user's module without
``candidates`` trains alone, as it always has. Each trains as it would
alone (its own checkpoints under ``<checkpoint location>/<candidate>``, so a retried step
resumes the candidate it was training) into a private folder; the winner is copied into the
model directory, which appears whole or not at all. The metric that decides: eval log loss
for a classifier, eval RMSE (of ``log(y)`` under ``label_transform: log``) for a regressor,
the same figure for every family. Each candidate's live curves are named after it
(``gbdt/val_loss``, ``mlp/loss``). A candidate that fails is said in one line and left out;
the step fails only when every candidate failed.

Where a family cannot train (trees and the linear model on a TPU or across several
workers) it is left out with the reason, before anything trains.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.progress import say
from gkeflow.components.train.families import parse_candidates
from gkeflow.components.train.params import TrainParams, TrainResult


class NoCandidateTrained(RuntimeError):
    """Every candidate of ``model_type: auto`` failed."""


def _fail_the_step() -> tuple[type[BaseException], ...]:
    """Errors no candidate can escape: a preemption (the retry resumes), and a host or data
    that cannot train as asked (no GPU where one was required, a log transform of a label
    below zero): the step fails at once, in one line, as for one family."""
    from gkeflow.components.train.backend import BackendError
    from gkeflow.components.train.checkpoint import Preempted
    from gkeflow.components.train.devices import GpuUnavailableError
    from gkeflow.components.train.regression import LabelTransformError

    return (Preempted, GpuUnavailableError, LabelTransformError, BackendError)


def deciding_metric(schema: Schema, label_transform: str) -> str:
    """The eval metric that picks the winner (lower is better)."""
    if not schema.regression:
        return "eval_loss"
    return "eval_rmse_log" if label_transform == "log" else "eval_rmse"


def plan_candidates(params: TrainParams, on_tpu: bool, workers: int
                    ) -> tuple[list[str], list[str]]:
    """The families to train here and one line per family left out, with the reason."""
    if params.user_module and not params.candidates:
        return ["user"], []  # your own model, as you asked; name candidates to compare it
    names = [n for n in parse_candidates(params.candidates)
             if n != "user" or params.user_module]
    chosen, left_out = [], []
    for name in names:
        if name in ("gbdt", "linear") and on_tpu:
            left_out.append(f"{name}: trains on CPUs or GPUs, not on this TPU")
        elif name in ("gbdt", "linear") and workers > 1:
            left_out.append(f"{name}: trains on one machine, not across {workers} workers")
        else:
            chosen.append(name)
    return chosen, left_out


def prefixed_curves(live, name: str):
    """``live`` (the step's live-curve callbacks) with each curve named ``<candidate>/<name>``
    (``gbdt/val_loss``, ``mlp/loss``), so the candidates' curves stay apart in one run."""
    if live is None:
        return None

    def make(sampler):
        import keras

        made = live(sampler)
        inner = [c for c in (made if isinstance(made, list) else [made]) if c is not None]
        if not inner:
            return None

        class Prefixed(keras.callbacks.Callback):
            def set_model(self, model):
                super().set_model(model)
                for callback in inner:
                    callback.set_model(model)

            def on_epoch_begin(self, epoch, logs=None):
                for callback in inner:
                    callback.on_epoch_begin(epoch, logs)

            def on_epoch_end(self, epoch, logs=None):
                renamed = {f"{name}/{key}": value for key, value in (logs or {}).items()}
                for callback in inner:
                    callback.on_epoch_end(epoch, renamed)

        return [Prefixed()]

    return make


def candidate_params(params: TrainParams, name: str) -> TrainParams:
    if name == "user":
        return replace(params, model_type="mlp")  # the user's module decides the model
    return replace(params, model_type=name, user_module="")


def train_candidates(dataset_dir: Path, schema: Schema, model_dir: Path, params: TrainParams,
                     checkpoint_dir=None, tensorboard_dir=None, data_uri: str = "",
                     live=None, train_one=None) -> TrainResult:
    """Train every candidate, export the best on the eval split into ``model_dir``.

    ``train_one`` trains one family (:func:`~gkeflow.components.train.logic.train`)."""
    from gkeflow.components._atomic import publish_dir
    from gkeflow.components.train import tpu as tpus
    from gkeflow.components.train.devices import workers_in_tf_config
    from gkeflow.components.train.exported import MODEL_METADATA_FILE

    on_tpu = (tpus.find_tpu(os.environ, tpus.tpu_device_files()) is not None
              or params.strategy == "tpu")
    names, left_out = plan_candidates(params, on_tpu, workers_in_tf_config(
        os.environ.get("TF_CONFIG", "")))
    metric = deciding_metric(schema, params.label_transform)
    say(f"model auto: candidates {', '.join(names)}; the best {metric} on the eval split wins")
    for line in left_out:
        say(f"model auto: left out {line}")
    if len(names) == 1:  # nothing to choose between: train it as that family alone
        return train_one(Path(dataset_dir), schema, Path(model_dir),
                         candidate_params(params, names[0]), checkpoint_dir=checkpoint_dir,
                         tensorboard_dir=tensorboard_dir, data_uri=data_uri, live=live)
    if not names:
        raise NoCandidateTrained("model_type auto: no candidate can train here ("
                                 + "; ".join(left_out) + "); name a family in candidates")
    results: dict[str, TrainResult] = {}
    report: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gkeflow-candidates-") as scratch:
        for name in names:
            started = time.perf_counter()
            say(f"candidate {name} training ({len(report) + 1} of {len(names)})")
            location = (f"{str(checkpoint_dir).rstrip('/')}/{name}" if checkpoint_dir
                        else None)
            try:
                result = train_one(Path(dataset_dir), schema, Path(scratch) / name,
                                   candidate_params(params, name), checkpoint_dir=location,
                                   tensorboard_dir=(Path(tensorboard_dir) / name
                                                    if tensorboard_dir else None),
                                   data_uri=data_uri, live=prefixed_curves(live, name))
            except Exception as exc:  # noqa: BLE001 - another candidate may still win
                if isinstance(exc, _fail_the_step()):  # imported once a family chose Keras' backend
                    raise
                line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                say(f"candidate {name} failed ({type(exc).__name__}: {line}); the others go on")
                report[name] = {"status": "failed", "error": f"{type(exc).__name__}: {line}"}
                continue
            value = result.metrics.get(metric)
            if value is None:  # no eval rows: the train split's figure
                value = result.metrics.get(metric.replace("eval_", "train_"))
            results[name] = result
            say(f"candidate {name}: {metric} {value:.4g} in "
                f"{time.perf_counter() - started:.0f} s" if value is not None
                else f"candidate {name}: done in {time.perf_counter() - started:.0f} s")
            report[name] = {"status": "succeeded", metric: value,
                            "seconds": round(time.perf_counter() - started, 1),
                            **{k: v for k, v in result.metrics.items()
                               if k.startswith(("eval_", "train_"))}}
        if not results:
            raise NoCandidateTrained("model_type auto: every candidate failed ("
                                     + "; ".join(f"{k}: {v['error']}" for k, v in report.items())
                                     + ")")
        winner = min(results, key=lambda n: (report[n][metric]
                                             if report[n][metric] is not None else float("inf"),
                                             names.index(n)))
        shown = ", ".join(f"{n} {report[n][metric]:.4f}" if report[n].get(metric) is not None
                          else f"{n} failed" for n in names if n in report)
        reason = f"lowest {metric} on the eval split ({shown})"
        blend = choose_ensemble(Path(dataset_dir), schema, params, results, Path(scratch))
        source = Path(scratch) / winner
        metadata = json.loads((source / MODEL_METADATA_FILE).read_text())
        chosen = winner
        if blend is not None:
            weights, value = blend
            chosen = "ensemble of " + ", ".join(f"{n} {w:.2f}" for n, w in weights.items())
            reason = (f"its {metric} on the eval split, {value:.4f}, beats the best single "
                      f"candidate's ({shown})")
            metadata.update({"model_family": "ensemble", "ensemble": weights,
                             "model": "ensemble"})
        say(f"model auto: {chosen} wins: {reason}")
        metadata.update({"model_selection": {"chosen": chosen, "metric": metric,
                                             "reason": reason, "candidates": report,
                                             "left_out": left_out}})
        if blend is not None:
            from gkeflow.components.train.ensemble import export_ensemble

            export_ensemble(Path(model_dir), {n: Path(scratch) / n for n in blend[0]},
                            blend[0], metadata)
        else:
            with publish_dir(Path(model_dir)) as published:
                shutil.copytree(source, published, dirs_exist_ok=True)
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
                    results: dict[str, TrainResult], scratch: Path):
    """(weights, eval error) of the greedy ensemble of the candidates, when it beats the
    best single candidate on the eval split by :data:`~.ensemble.MIN_GAIN`; else None."""
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.ensemble import MIN_GAIN, eval_error, greedy_weights
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import encode_labels, split_rows, to_model_inputs

    if len(results) < 2 or not params.ensemble or not split_rows(dataset_dir).get("eval"):
        return None
    frame = load_split(dataset_dir, "eval", schema)
    truth = (frame[schema.label].to_numpy(float) if schema.regression
             else encode_labels(frame, schema))
    predictions = {}
    for name, result in results.items():
        held_out = result.eval_predictions
        if held_out is None:  # a Keras model: trained on the train split only
            held_out = ExportedModel(scratch / name).predict_proba(
                to_model_inputs(frame, schema))
        predictions[name] = held_out
    single = min(eval_error(p, truth, schema.regression, params.label_transform)
                 for p in predictions.values())
    weights, value = greedy_weights(predictions, truth, schema.regression,
                                    params.label_transform)
    if len(weights) < 2 or not value < single * (1 - MIN_GAIN):
        return None
    return weights, value
