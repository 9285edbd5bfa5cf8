"""The training pipeline: prepare -> train -> evaluate -> (passes?) -> register.

One definition, built for a target: :func:`build_training_pipeline` is called with
``"local"`` for ``kfp.local`` runs and with ``"gke"`` / ``"vertex"`` by the compiler,
so the pipeline that runs locally is the very one that is compiled.
"""


from collections.abc import Mapping
from typing import Optional

from kfp import dsl

from components import evaluate_model, prepare_data, register_model, train_model
from components.prepare.logic import EMBEDDED_PENGUINS
from pipelines.compute import ComputeProfile, apply_compute

PIPELINE_NAME = "gkeflow-training"

#: Default per-step compute; a T4 GPU for training only.
DEFAULT_COMPUTE: Mapping[str, ComputeProfile] = {
    "prepare-data": ComputeProfile(cpu="2", memory="8G", caching=False),
    "train-model": ComputeProfile(
        cpu="8", memory="30G", accelerator="nvidia-tesla-t4", accelerator_count=1, retries=2
    ),
    "evaluate-model": ComputeProfile(cpu="2", memory="8G"),
    "register-model": ComputeProfile(cpu="1", memory="2G", caching=False, retries=2),
}

#: Where each target registers models unless the run says otherwise: the embedded registry
#: locally, the in-cluster Kubeflow Model Registry on GKE. Vertex AI runs pass
#: ``registry_uri=vertex://projects/<project>/locations/<location>``.
DEFAULT_REGISTRY_URIS: Mapping[str, str] = {
    "local": "sqlite:///gkeflow-registry.db",
    "gke": "kubeflow://model-registry-service.kubeflow.svc.cluster.local:8080",
    "vertex": "sqlite:///gkeflow-registry.db",
}

STEP_DISPLAY_NAMES = {
    "prepare-data": "Prepare data",
    "train-model": "Train model",
    "evaluate-model": "Evaluate model",
    "register-model": "Register model",
}


def build_training_pipeline(
    target: str = "local", compute: Optional[Mapping[str, ComputeProfile]] = None
):
    """Define ``training_pipeline`` with each step's compute applied for ``target``."""
    profiles = {**DEFAULT_COMPUTE, **(compute or {})}
    if target == "vertex":  # same step, with a google.VertexModel output for Vertex lineage
        from components.register.vertex_component import register_model as register_step
    else:
        register_step = register_model
    default_registry_uri = DEFAULT_REGISTRY_URIS.get(target, DEFAULT_REGISTRY_URIS["local"])

    def configure(task: dsl.PipelineTask, step: str) -> dsl.PipelineTask:
        task.set_display_name(STEP_DISPLAY_NAMES[step])
        return apply_compute(task, profiles[step], target)

    @dsl.pipeline(name=PIPELINE_NAME)
    def training_pipeline(
        data_uri: str = EMBEDDED_PENGUINS,
        label_column: str = "species",
        train_ratio: float = 0.7,
        eval_ratio: float = 0.15,
        test_ratio: float = 0.15,
        epochs: int = 20,
        batch_size: int = 32,
        learning_rate: float = 0.01,
        model_name: str = "penguins-classifier",
        min_accuracy: float = 0.8,
        registry_uri: str = default_registry_uri,
    ):
        """Trains a TensorFlow classifier on a CSV and registers it when it is accurate enough.

        Args:
            data_uri: CSV to train on; embedded://penguins is the bundled Palmer Penguins data.
            label_column: Column holding the class to predict.
            train_ratio: Fraction of rows for training.
            eval_ratio: Fraction of rows for validation during training.
            test_ratio: Fraction of rows held out for the final evaluation.
            epochs: Passes over the training split.
            batch_size: Examples per gradient step.
            learning_rate: Adam learning rate.
            model_name: Name under which the model is registered.
            min_accuracy: Test accuracy required before the model is registered.
            registry_uri: Model registry: sqlite:///<path> (embedded), vertex://projects/<p>/locations/<l> or kubeflow://host:port.
        """
        prepare = configure(
            prepare_data(
                data_uri=data_uri,
                label_column=label_column,
                train_ratio=train_ratio,
                eval_ratio=eval_ratio,
                test_ratio=test_ratio,
            ),
            "prepare-data",
        )
        train = configure(
            train_model(
                dataset=prepare.outputs["dataset"],
                schema=prepare.outputs["schema"],
                epochs=epochs,
                batch_size=batch_size,
                learning_rate=learning_rate,
            ),
            "train-model",
        )
        evaluate = configure(
            evaluate_model(
                dataset=prepare.outputs["dataset"],
                schema=prepare.outputs["schema"],
                model=train.outputs["model"],
                min_accuracy=min_accuracy,
            ),
            "evaluate-model",
        )
        with dsl.If(evaluate.outputs["Output"] == True, name="model-passes"):  # noqa: E712
            configure(
                register_step(
                    model=train.outputs["model"],
                    metrics=evaluate.outputs["metrics"],
                    model_name=model_name,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    pipeline_task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                    registry_uri=registry_uri,
                    data_uri=data_uri,
                ),
                "register-model",
            )

    return training_pipeline


#: The pipeline as ``kfp.local`` runs it.
training_pipeline = build_training_pipeline("local")
