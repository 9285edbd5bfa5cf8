"""KFP shell of one candidate of ``model_type: auto`` trained as a task of its own."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output

from gkeflow.components.images import GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def train_candidate(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    candidate: Output[Artifact],
    metrics: Output[Metrics],
    family: str,
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
    task_name: str = "train-candidate",
    checkpoint_uri: str = "",
    seed: int = 42,
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
    pipeline_candidates: str = "",
) -> str:
    """Trains one candidate family of model_type auto (gbdt, mlp, wide_deep, linear or
    your module) on the train split, beside the others, for train-model to choose from.

    It trains when the run asks for its family (model_type auto with the family among
    the candidates, or model_type naming it) and records why not otherwise. A failure of
    its family is recorded for train-model and leaves the step green (another candidate may
    win); a preemption, or a GPU required but absent, fails it (a retry resumes from its
    checkpoint).

    Args:
        dataset: Splits written by prepare_data.
        schema: Column types and vocabularies written by prepare_data.
        candidate: The family's SavedModel, eval-split metrics and predictions, and status.
        metrics: The candidate's eval-split metrics and training seconds.
        family: The family this task trains: gbdt, mlp, wide_deep, linear or user.
        epochs: Keras: maximum passes over the training split.
        batch_size: Keras: examples per step per replica.
        learning_rate: Keras: Adam learning rate.
        model_type: auto (this family when it is a candidate) or the one family to train.
        hidden_units: Keras: sizes of the hidden layers, comma-separated.
        dropout: Keras: dropout rate after each hidden layer.
        early_stopping_patience: Keras: epochs without eval-loss improvement; 0 = off.
        precision: auto, float32, mixed_float16 or mixed_bfloat16.
        jit_compile: XLA compilation: auto (on GPUs), on or off.
        strategy: auto or tpu.
        steps_per_execution: Training steps per call to the device; 0 = auto.
        user_module: Your module with build_model(schema, hparams) (family user).
        require_gpu: Fail instead of training on CPU when no GPU is visible.
        checkpoint_every_epochs: Checkpoint every N epochs (0 = only on SIGTERM).
        checkpoint_every_steps: Also checkpoint every N steps (0 = off).
        checkpoint_root: Pipeline root; checkpoints live under <root>/checkpoints/<run>/<task>.
        pipeline_run_id: Run id; the checkpoint location is the same on every retry.
        task_name: Task name, part of the checkpoint location.
        checkpoint_uri: Where checkpoints go instead; empty = as above.
        seed: Random seed.
        workspace_path: The run's workspace on GKE; "" = none.
        gpu_sample_interval_s: Seconds between GPU utilisation samples.
        gpu_utilisation_warn_below: Warn when mean GPU utilisation (%) is below this.
        loss: Regression loss: auto (mse), mse or huber.
        label_transform: Regression: none or log.
        backend: Keras backend: auto, tensorflow or jax.
        gbdt_rounds: gbdt: most boosting rounds.
        gbdt_learning_rate: gbdt: shrinkage of each round.
        gbdt_max_depth: gbdt: deepest tree.
        gbdt_min_child_weight: gbdt: least hessian weight in a leaf.
        gbdt_subsample: gbdt: fraction of rows each tree sees.
        gbdt_colsample_bytree: gbdt: fraction of features each tree sees.
        gbdt_reg_lambda: gbdt: L2 regularisation of leaf values.
        gbdt_early_stopping_rounds: gbdt: rounds without eval-loss improvement; 0 = off.
        candidates: model_type auto: the families tried, comma-separated; empty = those
            of pipeline_candidates (or your module alone, with user_module).
        pipeline_candidates: The families this pipeline has a candidate step for.

    Returns:
        One line: the family and its status (succeeded with its eval metric, failed with
        the error, or skipped with the reason).
    """
    from pathlib import Path

    from gkeflow.components.train.backend import BackendError, select_backend

    try:  # before anything imports Keras, which reads its backend once
        select_backend(backend)
    except BackendError as exc:
        raise SystemExit(f"{task_name}: {exc}") from None

    from gkeflow.components.train.candidate_step import run_candidate

    return run_candidate(locals(), Path(dataset.path), dataset.uri, Path(schema.path),
                         candidate, metrics)
