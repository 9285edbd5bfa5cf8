"""KFP shells of the scaled-out training step: same inputs and outputs as ``train_model``.

``train_model_local_workers`` runs the workers as processes beside it (``kfp.local``);
``train_model_jobset`` launches them as a GKE JobSet and waits for it. Both hand the chief's
exported model and summary back as the step's ``model`` and ``metrics`` outputs.
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from gkeflow.components.images import GPU_IMAGE, SLIM_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def train_model_local_workers(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    model: Output[Model],
    metrics: Output[Metrics],
    tensorboard: Output[Artifact],
    replicas: int = 2,
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    model_type: str = "mlp",
    user_module: str = "",
    require_gpu: bool = False,
    checkpoint_root: str = "",
    pipeline_run_id: str = "",
    task_name: str = "train-model",
    checkpoint_uri: str = "",
    early_stopping_patience: int = 5,
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
):
    """Trains across several worker processes on this machine (Keras: MultiWorkerMirrored;
    gradient-boosted trees: XGBoost's collective).

    Args:
        dataset: Splits written by prepare_data.
        schema: Column types and vocabularies written by prepare_data.
        model: SavedModel exported by the chief (worker 0).
        metrics: Loss and accuracy at the best epoch, examples/s, number of workers.
        tensorboard: TensorBoard event files of the run.
        replicas: Worker processes, talking over loopback.
        epochs: Maximum passes over the training split.
        batch_size: Examples per step per replica (the global batch scales with replicas).
        learning_rate: Adam learning rate for one replica (scaled linearly with replicas).
        model_type: Built-in model: mlp, wide_deep or gbdt.
        user_module: Python module (file path or import name) with build_model(schema, hparams).
        require_gpu: Fail instead of training on CPU when no GPU is visible.
        checkpoint_root: Pipeline root; checkpoints live under <root>/checkpoints/<run>/<task>.
        pipeline_run_id: Run id; the checkpoint location is the same on every retry of a run.
        task_name: Task name, part of the checkpoint location.
        checkpoint_uri: Where checkpoints go instead (gs://bucket/path or a directory),
            under <checkpoint_uri>/<run>/<task>; empty = under the pipeline root.
        early_stopping_patience: Epochs without eval-loss improvement before stopping; 0 = off.
        loss: Regression loss: auto (mse), mse or huber.
        label_transform: Regression: none, or log for a skewed positive label.
        backend: Keras backend: auto (JAX on a TPU, TensorFlow elsewhere), tensorflow or
            jax (its processes join by jax.distributed).
        gbdt_rounds: model_type gbdt (trained across the workers by XGBoost's collective):
            boosting rounds at most; the gbdt_* settings as train_model takes them.
        gbdt_learning_rate: Shrinkage of each tree.
        gbdt_max_depth: Depth of each tree.
        gbdt_min_child_weight: Least hessian sum in a leaf.
        gbdt_subsample: Share of rows each tree sees.
        gbdt_colsample_bytree: Share of features each tree sees.
        gbdt_reg_lambda: L2 regularisation of the leaf weights.
        gbdt_early_stopping_rounds: Rounds without eval improvement before stopping.
    """
    import shutil
    from pathlib import Path

    from gkeflow.components.scaleout import results
    from gkeflow.components.scaleout.local_workers import run_local_workers
    from gkeflow.components.tracking.handoff import open_remote_training

    params = results.worker_params(locals())
    tracking = open_remote_training(f"local-workers:{pipeline_run_id}:{task_name}",
                                    "local-workers", task_name)
    try:
        summary, published = run_local_workers(
            dataset.path, schema.path, params, replicas, checkpoint_root, pipeline_run_id,
            task_name, checkpoint_uri=checkpoint_uri, chief_env=tracking.env())
    except BaseException:
        tracking.end(succeeded=False)
        raise
    tracking.end(succeeded=True)
    try:
        results.install_model(published, Path(model.path))
    finally:
        shutil.rmtree(published.parent, ignore_errors=True)
    for name, value in results.metric_items(summary).items():
        metrics.log_metric(name, value)
    model.metadata.update(results.model_metadata(summary, dataset.uri, "local processes"))
    Path(tensorboard.path).mkdir(parents=True, exist_ok=True)
    tensorboard.metadata["log_dir"] = tensorboard.uri
    print(f"trained with {summary['strategy']}")


#: The launcher task's Kubernetes settings KFP hands to the JobSet's pods (KFP >= 2.15); see
#: :mod:`gkeflow.components.scaleout.task_config` for which also stay on the launcher pod.
JOBSET_PASSTHROUGHS = [
    # The launcher keeps its own (1-CPU) requests; the JobSet pods' requests come from the
    # profile, which wins over forwarded values.
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.RESOURCES, apply_to_task=True),
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
    dsl.TaskConfigField.KUBERNETES_AFFINITY,
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.ENV, apply_to_task=True),
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.KUBERNETES_VOLUMES, apply_to_task=True),
]


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False,
               task_config_passthroughs=JOBSET_PASSTHROUGHS)
def train_model_jobset(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    model: Output[Model],
    metrics: Output[Metrics],
    tensorboard: Output[Artifact],
    jobset_template: str,
    kubernetes_config: dsl.TaskConfig,
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    model_type: str = "mlp",
    user_module: str = "",
    require_gpu: bool = False,
    checkpoint_root: str = "",
    pipeline_run_id: str = "",
    task_name: str = "train-model",
    checkpoint_uri: str = "",
    call_timeout_s: float = 0.0,
    retry_budget_s: float = 0.0,
    early_stopping_patience: int = 5,
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
):
    """Trains on several GKE nodes (Keras or gradient-boosted trees): launches a JobSet of
    pods and waits for it.

    The JobSet's name comes from the run id and task name, so a retried step re-attaches to
    the JobSet it launched instead of starting a second one. The chief's log is followed
    here; API errors that pass (429, 5xx, dropped watches) are retried, never a reason to
    delete the JobSet, which is deleted only when it ended, when the run is cancelled, or
    when the launcher gives up for good (GKEFLOW_RETRY_BUDGET_S, default 900 s), and says
    so. The workers run as their own service account. Inputs and the model move through the
    pipeline root (Cloud Storage).

    Args:
        dataset: Splits written by prepare_data.
        schema: Column types and vocabularies written by prepare_data.
        model: SavedModel exported by the chief (worker 0).
        metrics: Loss and accuracy at the best epoch, examples/s, number of workers.
        tensorboard: TensorBoard event files of the run.
        jobset_template: The JobSet to launch (JSON), as compiled from the step's compute.
        kubernetes_config: This task's Kubernetes settings (filled in by KFP): merged into
            every JobSet pod where the compute profile does not set them; the profile wins.
        epochs: Maximum passes over the training split.
        batch_size: Examples per step per replica (the global batch scales with replicas).
        learning_rate: Adam learning rate for one replica (scaled linearly with replicas).
        model_type: Built-in model: mlp, wide_deep or gbdt.
        user_module: Python module (file path or import name) with build_model(schema, hparams).
        require_gpu: Fail instead of training on CPU when no GPU is visible.
        checkpoint_root: Pipeline root: inputs, checkpoints and the model travel through it.
        pipeline_run_id: Run id; names the JobSet together with task_name.
        task_name: Task name.
        checkpoint_uri: Where every pod checkpoints instead (gs://bucket/path), under
            <checkpoint_uri>/<run>/<task>; empty = under the pipeline root.
        call_timeout_s: Seconds before a call to the Kubernetes API is abandoned and
            retried (a watch: its window plus this); 0 = $GKEFLOW_CALL_TIMEOUT_S or 60.
        retry_budget_s: Seconds one failing operation is retried before the step gives up
            and deletes the JobSet; 0 = $GKEFLOW_RETRY_BUDGET_S or 900.
        early_stopping_patience: Epochs without eval-loss improvement before stopping; 0 = off.
        loss: Regression loss: auto (mse), mse or huber.
        label_transform: Regression: none, or log for a skewed positive label.
        backend: Keras backend: auto (JAX on a TPU, TensorFlow elsewhere), tensorflow or
            jax (its processes join by jax.distributed).
        gbdt_rounds: model_type gbdt (trained across the workers by XGBoost's collective):
            boosting rounds at most; the gbdt_* settings as train_model takes them.
        gbdt_learning_rate: Shrinkage of each tree.
        gbdt_max_depth: Depth of each tree.
        gbdt_min_child_weight: Least hessian sum in a leaf.
        gbdt_subsample: Share of rows each tree sees.
        gbdt_colsample_bytree: Share of features each tree sees.
        gbdt_reg_lambda: L2 regularisation of the leaf weights.
        gbdt_early_stopping_rounds: Rounds without eval improvement before stopping.
    """
    import json
    from pathlib import Path

    from gkeflow.components.scaleout import jobset_launcher, results

    params = results.worker_params(locals())
    summary = jobset_launcher.launch_step(
        template=json.loads(jobset_template), dataset_uri=dataset.uri, schema_uri=schema.uri,
        params=params, pipeline_root=checkpoint_root, run_id=pipeline_run_id,
        task_name=task_name, model_dir=Path(model.path), checkpoint_uri=checkpoint_uri,
        task_config=kubernetes_config, call_timeout_s=call_timeout_s,
        retry_budget_s=retry_budget_s)
    for name, value in results.metric_items(summary).items():
        metrics.log_metric(name, value)
    model.metadata.update(results.model_metadata(summary, dataset.uri, "GKE JobSet"))
    Path(tensorboard.path).mkdir(parents=True, exist_ok=True)
    tensorboard.metadata["log_dir"] = tensorboard.uri
