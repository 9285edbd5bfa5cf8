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

import os
import tempfile
from dataclasses import replace
from pathlib import Path

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.progress import say
from gkeflow.components.train.choose import (
    NoCandidateTrained,
    choose,
    deciding_metric,
    train_into,
)
from gkeflow.components.train.families import parse_candidates
from gkeflow.components.train.params import TrainParams, TrainResult

__all__ = ["NoCandidateTrained", "deciding_metric", "plan_candidates", "prefixed_curves",
           "on_tpu_host", "skip_reason", "train_candidates"]


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


def on_tpu_host(params: TrainParams) -> bool:
    """Whether this host trains on a TPU (one is visible, or ``strategy: tpu`` asks)."""
    from gkeflow.components.train import tpu as tpus

    return (tpus.find_tpu(os.environ, tpus.tpu_device_files()) is not None
            or params.strategy == "tpu")


def skip_reason(params: TrainParams, family: str, on_tpu: bool,
                pipeline_candidates: str = "") -> str:
    """Why the candidate task of ``family`` trains nothing in a run with ``params``; ""
    when it trains. Without ``candidates`` the run asks for ``pipeline_candidates`` (the
    families the pipeline has a step for; empty: the default set), or for the user's module
    alone when it gives one."""
    if params.model_type != "auto":
        return "" if family == params.model_type else f"model_type is {params.model_type}"
    if not params.candidates.strip() and pipeline_candidates and not params.user_module:
        params = replace(params, candidates=pipeline_candidates)
    names, left_out = plan_candidates(params, on_tpu, 1)
    if family in names:
        return ""
    for line in left_out:
        if line.startswith(f"{family}:"):
            return line.split(": ", 1)[1]
    return f"not among this run's candidates ({', '.join(names) or 'none'})"


def train_candidates(dataset_dir: Path, schema: Schema, model_dir: Path, params: TrainParams,
                     checkpoint_dir=None, tensorboard_dir=None, data_uri: str = "",
                     live=None, train_one=None) -> TrainResult:
    """Train every candidate one after the other, export the best on the eval split into
    ``model_dir``.

    ``train_one`` trains one family (:func:`~gkeflow.components.train.logic.train`)."""
    from gkeflow.components.train.devices import workers_in_tf_config

    on_tpu = on_tpu_host(params)
    names, left_out = plan_candidates(params, on_tpu, workers_in_tf_config(
        os.environ.get("TF_CONFIG", "")))
    metric = deciding_metric(schema, params.label_transform)
    say(f"model auto: candidates {', '.join(names)}; the best {metric} on the eval split wins")
    for line in left_out:
        say(f"model auto: left out {line}")
    if len(names) == 1:  # nothing to choose between: train it as that family alone
        from gkeflow.components.train.choose import candidate_params

        return train_one(Path(dataset_dir), schema, Path(model_dir),
                         candidate_params(params, names[0]), checkpoint_dir=checkpoint_dir,
                         tensorboard_dir=tensorboard_dir, data_uri=data_uri, live=live)
    if not names:
        raise NoCandidateTrained("model_type auto: no candidate can train here ("
                                 + "; ".join(left_out) + "); name a family in candidates")
    with tempfile.TemporaryDirectory(prefix="gkeflow-candidates-") as scratch:
        folders = {name: Path(scratch) / name for name in names}
        for number, name in enumerate(names, 1):
            say(f"candidate {name} training ({number} of {len(names)})")
            location = (f"{str(checkpoint_dir).rstrip('/')}/{name}" if checkpoint_dir
                        else None)
            train_into(folders[name], name, metric, train_one, Path(dataset_dir), schema,
                       params, checkpoint_dir=location,
                       tensorboard_dir=(Path(tensorboard_dir) / name
                                        if tensorboard_dir else None),
                       data_uri=data_uri, live=prefixed_curves(live, name))
        return choose(Path(dataset_dir), schema, Path(model_dir), params, folders, left_out)

