"""One worker of a multi-machine training run: ``python -m gkeflow.components.scaleout.worker``.

Each worker (a JobSet pod, a local process) builds its ``TF_CONFIG`` from the cluster's host
names and its own index (:mod:`gkeflow.components.scaleout.cluster`), fetches the prepared
dataset and schema from the pipeline root, and trains with MultiWorkerMirroredStrategy.
Only the chief (worker 0) publishes the exported model, with a summary written last, and
logs training into the MLflow run its launcher handed down (``GKEFLOW_MLFLOW_TRAINING_RUN_ID``,
:mod:`gkeflow.components.tracking.handoff`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

from gkeflow.components.tracking.client import ENV_TRAINING_RUN

#: TrainParams fields a launcher may pass through ``--params``.
EXIT_PREEMPTED = 143


def train_params(raw: dict):
    """``TrainParams`` from JSON; unknown keys are an error naming them."""
    from gkeflow.components.train.params import TrainParams, params_from

    known = {f.name for f in fields(TrainParams)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"unknown training parameter(s) {', '.join(unknown)}")
    return params_from(raw)


def run_worker(dataset_uri: str, schema_uri: str, output_uri: str, params: dict,
               checkpoint_root: str = "", run_id: str = "", task_name: str = "",
               checkpoint_uri: str = "") -> dict | None:
    """Train as this process's worker; the chief publishes and returns the summary.

    Checkpoints live under ``checkpoint_uri`` when set, else under ``checkpoint_root``
    (see :func:`~gkeflow.components.train.store.resolve_checkpoint_location`): the same
    location for every worker and every retry of the run's task.
    """
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.scaleout import cluster, storage
    from gkeflow.components.train import devices
    from gkeflow.components.train.backend import select_backend
    from gkeflow.components.train.logic import train
    from gkeflow.components.train.store import resolve_checkpoint_location

    config = cluster.tf_config_from_env()
    jax = select_backend(str(params.get("backend", "auto"))) == "jax"  # main() chose it first
    if config and not jax:  # Keras on JAX joins its processes itself (train/jax_runtime.py)
        os.environ["TF_CONFIG"] = config
    workers = devices.workers_in_tf_config(config)
    chief = devices.is_chief(config)
    # the chief's curves go to the Vertex AI experiment's TensorBoard, when the step has one
    from gkeflow.components.tracking.vertex_curves import open_writer, vertex_curves

    curves = open_writer(os.environ) if chief else None
    with tempfile.TemporaryDirectory(prefix="gkeflow-worker-") as scratch:
        scratch = Path(scratch)
        dataset_dir = storage.download(dataset_uri, scratch / "dataset")
        schema_path = storage.download(schema_uri, scratch / "schema")
        model_dir = scratch / "model"
        result = train(
            dataset_dir=dataset_dir,
            schema=Schema.load(schema_path),
            model_dir=model_dir,
            params=train_params(params),
            checkpoint_dir=resolve_checkpoint_location(checkpoint_uri, checkpoint_root,
                                                       run_id, task_name) or None,
            data_uri=dataset_uri,
            live=(lambda sampler: vertex_curves(curves)) if curves is not None else None,
        )
        if not chief:
            return None
        if os.environ.get(ENV_TRAINING_RUN):
            # the launcher's run (components/tracking/handoff.py): the chief alone logs
            from gkeflow.components.tracking.steps import track_training
            from gkeflow.components.train.mlflow_model import save_mlflow_model

            track_training(result, train_params(params), model_dir, task=task_name,
                           writer=save_mlflow_model)
        summary = {
            "metrics": result.metrics,
            "examples_per_s": result.examples_per_s,
            "epoch_examples_per_s": list(result.epoch_examples_per_s),
            "epochs_run": result.epochs_run,
            "best_epoch": result.best_epoch,
            "features": result.features,
            "strategy": result.strategy,
            "workers": workers,
            "precision": result.precision,
        }
        storage.publish(model_dir, output_uri, summary)
        return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gkeflow-worker", description=__doc__)
    parser.add_argument("--dataset", required=True, help="Prepared dataset URI.")
    parser.add_argument("--schema", required=True, help="Schema artifact URI.")
    parser.add_argument("--output", required=True,
                        help="Where the chief publishes the model (gs:// or a path).")
    parser.add_argument("--params", default="{}", help="TrainParams as JSON.")
    parser.add_argument("--checkpoint-root", default="")
    parser.add_argument("--run-id", default="")
    parser.add_argument("--task-name", default="")
    parser.add_argument("--checkpoint-uri", default="",
                        help="Where checkpoints go instead of under the checkpoint root.")
    args = parser.parse_args(argv)
    params = json.loads(args.params)
    from gkeflow.components.train.backend import BackendError, select_backend

    try:  # before anything imports Keras, which reads its backend once
        select_backend(str(params.get("backend", "auto")))
    except BackendError as exc:
        print(f"gkeflow-worker: {exc}", file=sys.stderr)
        return 2
    from gkeflow.components.train.preemption import Preempted

    try:
        summary = run_worker(args.dataset, args.schema, args.output, params,
                             args.checkpoint_root, args.run_id, args.task_name,
                             args.checkpoint_uri)
    except Preempted as exc:
        print(f"worker preempted: {exc}", file=sys.stderr)
        return EXIT_PREEMPTED
    if summary is not None:
        print("GKEFLOW_RESULT " + json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
