"""KFP shell of the training step."""

from typing import Optional

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from gkeflow.components.images import GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def train_model(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    model: Output[Model],
    metrics: Output[Metrics],
    tensorboard: Output[Artifact],
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    model_type: str = "auto",
    hidden_units: str = "256,128",
    dropout: float = 0.1,
    early_stopping_patience: int = 5,
    precision: str = "auto",
    jit_compile: str = "auto",
    strategy: str = "auto",
    steps_per_execution: int = 0,
    user_module: str = "",
    require_gpu: bool = False,
    checkpoint_every_epochs: int = 1,
    checkpoint_every_steps: int = 0,
    checkpoint_root: str = "",
    pipeline_run_id: str = "",
    task_name: str = "train-model",
    checkpoint_uri: str = "",
    checkpoint_key: str = "",
    seed: int = 42,
    continue_on_error: bool = False,
    workspace_path: str = "",
    gpu_sample_interval_s: float = 5.0,
    gpu_utilisation_warn_below: float = 40.0,
    loss: str = "auto",
    label_transform: str = "none",
    backend: str = "auto",
    gbdt_rounds: int = 2000,
    gbdt_learning_rate: float = 0.05,
    gbdt_max_depth: int = 6,
    gbdt_min_child_weight: float = 1.0,
    gbdt_subsample: float = 1.0,
    gbdt_colsample_bytree: float = 1.0,
    gbdt_reg_lambda: float = 1.0,
    gbdt_early_stopping_rounds: int = 100,
    candidates: str = "",
    gbdt_candidate: Optional[Input[Artifact]] = None,
    mlp_candidate: Optional[Input[Artifact]] = None,
    wide_deep_candidate: Optional[Input[Artifact]] = None,
    linear_candidate: Optional[Input[Artifact]] = None,
    user_candidate: Optional[Input[Artifact]] = None,
) -> str:
    """Trains a Keras classifier (or regressor), or gradient-boosted trees, on the train
    split and exports a SavedModel taking raw features.

    Trains on Keras' TensorFlow backend (every GPU of the pod, every worker in TF_CONFIG)
    or its JAX backend (every chip of the TPU slices, every GPU), fails fast when a GPU or
    TPU was requested but is not visible, and resumes from its last checkpoint when retried.
    On SIGTERM (Spot preemption) it stops after the current batch, commits a checkpoint and
    exits with code 143, which the step's retry policy retries.

    Args:
        dataset: Splits written by prepare_data.
        schema: Column types and vocabularies written by prepare_data.
        model: SavedModel whose serving signature takes raw feature values.
        metrics: Loss and accuracy at the best epoch, examples/s, GPU memory, GPU
            utilisation (mean, p10, peak per run and per epoch; gpu_utilisation_missing = 1
            without a GPU).
        tensorboard: TensorBoard event files of the run.
        epochs: Maximum passes over the training split.
        batch_size: Examples per step per replica (the global batch scales with replicas).
        learning_rate: Adam learning rate for one replica (scaled linearly with replicas).
        model_type: auto (train the candidates, keep the best on the eval split), mlp,
            wide_deep (Keras), gbdt (XGBoost trees, on the step's GPU when it has one) or
            linear (ridge or logistic regression); all export the same raw-feature SavedModel.
        hidden_units: Sizes of the hidden layers, comma-separated.
        dropout: Dropout rate after each hidden layer.
        early_stopping_patience: Epochs without eval-loss improvement before stopping; 0 = off.
        precision: auto, float32, mixed_float16 or mixed_bfloat16.
        jit_compile: XLA compilation: auto (on GPUs), on or off.
        strategy: auto (the TPU when the step has one, else from GPUs and TF_CONFIG) or tpu
            (fail when the step has no TPU).
        steps_per_execution: Training steps per call to the device; 0 = auto (up to 32 on a
            TPU, 1 elsewhere).
        user_module: Python module (file path or import name) with build_model(schema, hparams).
        require_gpu: Fail instead of training on CPU when no GPU is visible.
        checkpoint_every_epochs: Checkpoint every N epochs (0 = only on SIGTERM).
        checkpoint_every_steps: Also checkpoint every N steps (0 = off).
        checkpoint_root: Pipeline root; checkpoints live under <root>/checkpoints/<run>/<task>
            for gs:// and local roots, else on the run's checkpoint volume when mounted.
        pipeline_run_id: Run id; the checkpoint location is the same on every retry of a run.
        task_name: Task name, part of the checkpoint location.
        checkpoint_uri: Where checkpoints go instead (gs://bucket/path or a mounted
            directory), under <checkpoint_uri>/<run>/<task>; empty = as above.
        checkpoint_key: Extra part of the checkpoint location, to keep several trainings
            in one task apart (e.g. sweep trials); empty = none.
        seed: Random seed for weights and shuffling.
        continue_on_error: Report a training error in the returned summary instead of
            failing the step (sweep trials); a preemption still fails it, so a retry resumes.
        workspace_path: The run's workspace (dsl.WORKSPACE_PATH_PLACEHOLDER on GKE with a
            root other than gs://): shards are read and checkpoints kept there; "" = none.
        gpu_sample_interval_s: Seconds between GPU utilisation samples (kept within 1-60).
        gpu_utilisation_warn_below: Warn when the run's mean GPU utilisation (%) is below
            this (the GPUs mostly waited: input-bound or batches too small); 0 = never.
        loss: Regression loss on the standardised label: auto (mse), mse or huber; a
            classifier always uses cross-entropy.
        label_transform: Regression: none, or log for a skewed positive label (the model
            learns log(y) and predicts y).
        backend: Keras backend: auto (JAX on a TPU, TensorFlow elsewhere), tensorflow or
            jax; both export the same TensorFlow SavedModel.
        gbdt_rounds: gbdt: most boosting rounds.
        gbdt_learning_rate: gbdt: shrinkage of each round (XGBoost's eta).
        gbdt_max_depth: gbdt: deepest tree.
        gbdt_min_child_weight: gbdt: least hessian weight in a leaf.
        gbdt_subsample: gbdt: fraction of rows each tree sees.
        gbdt_colsample_bytree: gbdt: fraction of features each tree sees.
        gbdt_reg_lambda: gbdt: L2 regularisation of leaf values.
        gbdt_early_stopping_rounds: gbdt: rounds without eval-loss improvement before
            boosting stops (the best round is kept); 0 = off.
        candidates: model_type auto: the families tried, comma-separated (gbdt, mlp,
            wide_deep, linear, user); empty = gbdt, mlp, linear (and user with a user_module).
        gbdt_candidate: gbdt trained by its own task (train_candidate): with any of the
            *_candidate inputs this step trains nothing and keeps the best of them on the
            eval split (or their ensemble).
        mlp_candidate: The Keras MLP trained by its own task.
        wide_deep_candidate: The Keras wide & deep model trained by its own task.
        linear_candidate: The linear model trained by its own task.
        user_candidate: Your module's model trained by its own task.

    Returns:
        JSON summary: trial_id (the task name), status, eval-split metrics, model URI and
        warnings (e.g. low GPU utilisation).
    """
    from pathlib import Path

    from gkeflow.components.train.backend import BackendError, select_backend

    try:  # before anything imports Keras, which reads its backend once
        select_backend(backend)
    except BackendError as exc:
        raise SystemExit(f"train-model: {exc}") from None

    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.train.choose import NoCandidateTrained
    from gkeflow.components.train.devices import GpuUnavailableError
    from gkeflow.components.train.gbdt_settings import GbdtSettingsError
    from gkeflow.components.train.logic import train
    from gkeflow.components.train.params import step_params
    from gkeflow.components.train.preemption import Preempted, exit_on_preemption
    from gkeflow.components.train.regression import LabelTransformError
    from gkeflow.components.train.report import trial_report
    from gkeflow.components.train.store import checkpoint_mount, resolve_checkpoint_location
    from gkeflow.components.train.tpu import TpuUnavailableError

    params = step_params(locals())
    location = resolve_checkpoint_location(checkpoint_uri, checkpoint_root, pipeline_run_id,
                                           task_name, checkpoint_key,
                                           mount=checkpoint_mount(workspace_path))
    print(f"checkpoints: {location or 'none (not resumable)'}", flush=True)
    import os

    from gkeflow.components.tracking.live import live_curves
    from gkeflow.components.tracking.steps import start_training_run, track_training
    from gkeflow.components.train.devices import writes_outputs
    from gkeflow.components.train.mlflow_model import save_mlflow_model

    # the chief's run opens now, so the curves show while it trains
    tracker = (start_training_run(params, task=checkpoint_key or task_name)
               if writes_outputs(os.environ) else None)
    from gkeflow.components.tracking.vertex_curves import open_writer, vertex_curves

    # the chief's curves also go to the Vertex AI experiment's TensorBoard, when it has one
    curves = open_writer(os.environ) if writes_outputs(os.environ) else None

    def live(sampler):
        return [live_curves(tracker, sampler) if tracker is not None else None,
                vertex_curves(curves)]
    with exit_on_preemption():
        try:
            folders = {name: Path(given.path) for name, given in (
                ("gbdt", gbdt_candidate), ("mlp", mlp_candidate),
                ("wide_deep", wide_deep_candidate), ("linear", linear_candidate),
                ("user", user_candidate)) if given is not None}
            from gkeflow.components.train.choose import asked_any, choose

            if folders and not asked_any(folders):
                print(f"{task_name}: this run asks for no family of this pipeline's candidate "
                      f"steps ({', '.join(folders)}): it trains here, on {task_name}'s own "
                      "compute (compile with candidates: in gkeflow.yaml to give it a step)",
                      flush=True)
                folders = {}
            if folders:  # trained by their own tasks: choose

                # the candidates' curves are in their own steps: an empty folder here (a
                # cache entry whose artifact is missing is never served)
                Path(tensorboard.path).mkdir(parents=True, exist_ok=True)

                result = choose(Path(dataset.path), Schema.load(Path(schema.path)),
                                Path(model.path), params, folders)
            else:
                result = train(
                    dataset_dir=Path(dataset.path),
                    schema=Schema.load(Path(schema.path)),
                    model_dir=Path(model.path),
                    params=params,
                    checkpoint_dir=location or None,
                    tensorboard_dir=Path(tensorboard.path),
                    data_uri=dataset.uri,
                    live=live,
                )
        except BaseException as exc:
            if tracker is not None:  # a preempted run is resumed into the same MLflow run
                tracker.finish("KILLED" if isinstance(exc, (Preempted, KeyboardInterrupt))
                               else "FAILED")
            if isinstance(exc, Preempted) or not isinstance(exc, Exception):
                raise
            if not continue_on_error:
                if isinstance(exc, (TpuUnavailableError, GpuUnavailableError,
                                    LabelTransformError, BackendError, GbdtSettingsError,
                                    NoCandidateTrained)):
                    # the host or the data cannot train as asked: one line, no traceback
                    raise SystemExit(f"train-model: {exc}") from None
                raise
            import traceback

            traceback.print_exc()
            return trial_report(task_name, model.uri, error=f"{type(exc).__name__}: {exc}")
    if not writes_outputs(os.environ):
        # A worker replica of a multi-node job (a Vertex AI CustomJob's worker pool runs this
        # same step) or a host of a multi-host TPU slice other than worker 0: the chief
        # publishes the model, metrics and the step's outputs. Leave before the KFP executor
        # writes this replica's outputs over the chief's.
        import sys

        print("gkeflow: worker replica done; the chief publishes the step's outputs",
              flush=True)
        sys.stderr.flush()
        os._exit(0)
    for name, value in result.metrics.items():
        metrics.log_metric(name, round(value, 6))
    metrics.log_metric("examples_per_s", round(result.examples_per_s, 1))
    metrics.log_metric("best_epoch", result.best_epoch)
    usage = result.gpu_utilisation
    for name, value in (usage.epoch_metrics() if usage else {}).items():
        metrics.log_metric(name, round(value, 6))
    import json

    from gkeflow.components.train.exported import MODEL_METADATA_FILE

    exported = json.loads((Path(model.path) / MODEL_METADATA_FILE).read_text())
    model.metadata.update({
        "framework": "tensorflow",
        "model_family": exported.get("model_family", "keras"),
        "model_selection": (f"{exported['model_selection']['chosen']}: "
                            f"{exported['model_selection']['reason']}"
                            if exported.get("model_selection") else ""),
        "epochs_run": result.epochs_run,
        "best_epoch": result.best_epoch,
        "features": result.features,
        "strategy": result.strategy,
        "training_backend": result.backend,
        "precision": result.precision,
        "training_data_uri": dataset.uri,
        "gpu_utilisation": usage.summary_line() if usage else "",
        "gpu_utilisation_warning": result.gpu_utilisation_warning,
    })
    tensorboard.metadata["log_dir"] = tensorboard.uri
    track_training(result, params, Path(model.path), task=checkpoint_key or task_name,
                   tracker=tracker, live=tracker is not None, model_uri=model.uri,
                   writer=save_mlflow_model)
    warnings = [result.gpu_utilisation_warning] if result.gpu_utilisation_warning else []
    return trial_report(task_name, model.uri, result.metrics, warnings=warnings)
