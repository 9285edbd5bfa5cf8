"""The scoring pipeline: predict (the registry's champion on new rows) -> report.

One definition, built for a target like the training pipeline: ``"local"`` for
``kfp.local``, ``"gke"`` / ``"vertex"`` for the compiler. The scoring step's compute comes
from the same helper as training (a GPU profile switches it to the GPU image). On Vertex
AI, ``use_batch_prediction_job=True`` scores with a Vertex AI BatchPredictionJob for the
registered model instead of the in-pipeline step.
"""

from collections.abc import Mapping
from typing import Optional

from kfp import dsl

from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS
from gkeflow.pipelines.compute import launchers
from gkeflow.pipelines.compute import lustre as lustre_mounts
from gkeflow.pipelines.compute.gcsfuse import apply_gcsfuse
from gkeflow.pipelines.compute.profiles import (
    ComputeError,
    ComputeProfile,
    apply_compute,
    validate_profiles,
)
from gkeflow.pipelines.compute.wording import plural
from gkeflow.pipelines.definitions.operations import Operations
from gkeflow.pipelines.settings.gcsfuse_config import GcsFuseSettings
from gkeflow.pipelines.settings.lustre_config import LustreSettings
from gkeflow.pipelines.settings.platforms import platform

PIPELINE_NAME = "gkeflow-prediction"

#: Default per-step compute. Scoring is never served from cache: the same URI holds new
#: rows on every scheduled run, and the champion may have changed.
DEFAULT_COMPUTE: Mapping[str, ComputeProfile] = {
    "resolve-model": ComputeProfile(cpu="1", memory="1G", caching=False, timeout_s=600,
                                    retries=2, retry_backoff_s=30, retry_backoff_factor=2.0,
                                    retry_max_duration_s=600),
    "predict-batch": ComputeProfile(
        cpu="4", memory="16G", caching=False, timeout_s=6 * 3600, retries=2,
        retry_backoff_s=60, retry_backoff_factor=2.0, retry_max_duration_s=3600),
    "report-predictions": ComputeProfile(cpu="1", memory="4G", caching=False, timeout_s=1800),
    "batch-predict-vertex": ComputeProfile(
        cpu="1", memory="2G", caching=False, timeout_s=24 * 3600, retries=2,
        retry_backoff_s=60, retry_backoff_factor=2.0, retry_max_duration_s=3600),
}

STEP_DISPLAY_NAMES = {
    "resolve-model": "Find the model",
    "predict-batch": "Score rows",
    "report-predictions": "Report",
    "batch-predict-vertex": "Vertex AI batch prediction",
}

#: Where each target looks models up unless the run says otherwise (as training registers).
DEFAULT_REGISTRY_URIS: Mapping[str, str] = {
    "local": "sqlite:///gkeflow-registry.db",
    "gke": "kubeflow://model-registry-service.kubeflow.svc.cluster.local:8080",
    "vertex": "sqlite:///gkeflow-registry.db",
}


def _steps(target: str) -> list[str]:
    """This pipeline's steps on ``target``. On GKE a lookup step comes first: the scoring
    step then takes the model as an imported artifact, which the KFP launcher downloads
    from wherever it was registered (the in-cluster MinIO of a standard install too)."""
    steps = ["predict-batch", "report-predictions"]
    if platform(target).kubernetes:
        return ["resolve-model", *steps]
    return steps + ["batch-predict-vertex"] if platform(target).managed else steps


def _components(profiles: Mapping[str, ComputeProfile]) -> dict:
    """Step -> component; the scoring step runs in the GPU image when it asks for a GPU."""
    from gkeflow.components.images import GPU_IMAGE
    from gkeflow.components.predict.component import predict_batch, report_predictions
    from gkeflow.components.predict.resolve_component import resolve_model
    from gkeflow.components.predict.vertex_component import batch_predict_vertex

    scorer = predict_batch
    if profiles.get("predict-batch") and profiles["predict-batch"].uses_gpu:
        scorer = dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)(
            predict_batch.python_func)
    return {"resolve-model": resolve_model, "predict-batch": scorer,
            "report-predictions": report_predictions,
            "batch-predict-vertex": batch_predict_vertex}


def step_images(target: str = "gke", compute: Mapping[str, ComputeProfile] | None = None
                ) -> dict[str, str]:
    """Step -> the image its component runs in."""
    profiles = {**DEFAULT_COMPUTE, **{k: v for k, v in (compute or {}).items()
                                      if k in DEFAULT_COMPUTE}}
    components = _components(profiles)
    return {step: components[step].component_spec.implementation.container.image
            for step in _steps(target)}


def resolve_compute(target: str, compute: Mapping[str, ComputeProfile] | None = None
                    ) -> dict[str, ComputeProfile]:
    """This pipeline's per-step profiles (defaults, then ``compute``), validated for ``target``.

    Profiles for other pipelines' steps (training's, from the same gkeflow.yaml) are left
    out; a step name that no pipeline has is an error.
    """
    from gkeflow.components.images import IMAGES
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE as TRAINING_COMPUTE

    unknown = sorted(set(compute or {}) - set(DEFAULT_COMPUTE) - set(TRAINING_COMPUTE))
    if unknown:
        raise ComputeError(f"unknown {plural(len(unknown), 'step')} {', '.join(unknown)}; "
                           f"prediction steps are {', '.join(DEFAULT_COMPUTE)}")
    steps = _steps(target)
    profiles = {step: (compute or {}).get(step, DEFAULT_COMPUTE[step]) for step in steps}
    images = step_images(target, profiles)
    validate_profiles(profiles, target, {step: IMAGES.get(images[step]) for step in steps})
    return profiles


def build_prediction_pipeline(
    target: str = "local", compute: Optional[Mapping[str, ComputeProfile]] = None,
    operations: Optional[Operations] = None, gcsfuse: Optional[GcsFuseSettings] = None,
    lustre: Optional[LustreSettings] = None,
):
    """Define ``prediction_pipeline``, each step's compute validated and applied for ``target``.

    ``gcsfuse``: buckets mounted in the scoring step, which reads ``data_uri`` under them
    through the mount (see :mod:`gkeflow.pipelines.compute.gcsfuse`); ``lustre``: Managed
    Lustre instances, likewise (GKE).
    """
    profiles = resolve_compute(target, compute)
    if problem := lustre_mounts.check_target(lustre, target):
        raise ComputeError(problem)
    operations = (operations or Operations(target)).priced(profiles)
    components = _components(profiles)
    default_registry_uri = operations.registry_default(
        DEFAULT_REGISTRY_URIS.get(target, DEFAULT_REGISTRY_URIS["local"]))

    def configure(task: dsl.PipelineTask, step: str) -> dsl.PipelineTask:
        task.set_display_name(STEP_DISPLAY_NAMES[step])
        operations.track(task, step, PIPELINE_NAME)
        apply_gcsfuse(task, step, gcsfuse, target)
        lustre_mounts.apply_lustre(task, step, lustre, target)
        return apply_compute(task, profiles[step], target, step)

    def score(data_uri, model_name, model_version, model_alias, registry_uri, output_uri,
              output_format, key_column, max_rejected_fraction, max_drift,
              reject_unseen_categories, batch_rows, bq_write_mode):
        imported = {}
        if platform(target).kubernetes:  # the launcher fetches the model, whatever store holds it
            found = configure(components["resolve-model"](
                model=model_name, registry_uri=registry_uri, model_version=model_version,
                model_alias=model_alias), "resolve-model")
            imported["model_files"] = dsl.importer(
                artifact_uri=found.output, artifact_class=dsl.Model, reimport=False,
            ).set_display_name("Import the model").output
        predict = configure(components["predict-batch"](
            data_uri=data_uri, model=model_name, model_version=model_version,
            model_alias=model_alias, registry_uri=registry_uri, output_uri=output_uri,
            output_format=output_format, key_column=key_column,
            max_rejected_fraction=max_rejected_fraction, max_drift=max_drift,
            reject_unseen_categories=reject_unseen_categories, batch_rows=batch_rows,
            bq_write_mode=bq_write_mode, pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            **imported,
        ), "predict-batch")
        configure(components["report-predictions"](
            predictions=predict.outputs["predictions"],
            scoring_report=predict.outputs["report"],
        ), "report-predictions")

    if not platform(target).managed:
        @dsl.pipeline(name=PIPELINE_NAME, pipeline_config=operations.pipeline_config(None))
        @operations.wrap(PIPELINE_NAME)
        def prediction_pipeline(
            data_uri: str = EMBEDDED_PENGUINS,
            model_name: str = "penguins-classifier",
            model_version: int = 0,
            model_alias: str = "",
            registry_uri: str = default_registry_uri,
            output_uri: str = "",
            output_format: str = "parquet",
            key_column: str = "",
            max_rejected_fraction: float = 0.1,
            max_drift: float = 0.3,
            reject_unseen_categories: bool = False,
            batch_rows: int = 65536,
            bq_write_mode: str = "truncate",
        ):
            """Scores new rows with the registry's champion (or a chosen version) and reports.

            Args:
                data_uri: Rows to score: CSV/Parquet path or glob, gs:// URI or glob, or
                    bq://project.dataset.table.
                model_name: Registered model to score with.
                model_version: Version to use; 0 = by alias.
                model_alias: Alias to use; empty = champion (the newest version when none
                    was promoted).
                registry_uri: sqlite:///<path>, vertex://projects/<p>/locations/<l> or
                    kubeflow://host:port.
                output_uri: Also publish predictions here: gs://bucket/file.parquet (or
                    .csv) or bq://project.dataset.table; empty: the pipeline artifact only.
                output_format: parquet or csv.
                key_column: Column identifying each row in the predictions; empty = the row
                    number.
                max_rejected_fraction: Fail when more than this fraction of rows is rejected.
                max_drift: Fail when any feature column drifts on more than this fraction of
                    rows (new categories, numbers outside the training range; a missing
                    column counts as 1); 1 disables the check.
                reject_unseen_categories: Reject rows with categories the model never saw.
                batch_rows: Rows per call of the model.
                bq_write_mode: For bq:// outputs: truncate or append.
            """
            score(data_uri, model_name, model_version, model_alias, registry_uri, output_uri,
                  output_format, key_column, max_rejected_fraction, max_drift,
                  reject_unseen_categories, batch_rows, bq_write_mode)

        return prediction_pipeline

    @dsl.pipeline(name=PIPELINE_NAME)
    @operations.wrap(PIPELINE_NAME)
    def prediction_pipeline_vertex(
        data_uri: str = EMBEDDED_PENGUINS,
        model_name: str = "penguins-classifier",
        model_version: int = 0,
        model_alias: str = "",
        registry_uri: str = default_registry_uri,
        output_uri: str = "",
        output_format: str = "parquet",
        key_column: str = "",
        max_rejected_fraction: float = 0.1,
        max_drift: float = 0.3,
        reject_unseen_categories: bool = False,
        batch_rows: int = 65536,
        bq_write_mode: str = "truncate",
        use_batch_prediction_job: bool = False,
        batch_machine_type: str = "n1-standard-4",
        batch_accelerator_type: str = "",
        batch_accelerator_count: int = 0,
        batch_max_replicas: int = 1,
    ):
        """Scores new rows with the registry's champion (or a chosen version) and reports.

        Args:
            data_uri: Rows to score: CSV/Parquet path or glob, gs:// URI or glob, or
                bq://project.dataset.table (batch prediction jobs: gs:// JSONL or bq://).
            model_name: Registered model to score with.
            model_version: Version to use; 0 = by alias.
            model_alias: Alias to use; empty = champion (the newest version when none
                was promoted).
            registry_uri: vertex://projects/<p>/locations/<l> (set by gkeflow submit), or
                sqlite:///<path> / kubeflow://host:port.
            output_uri: Also publish predictions here: gs://bucket/file.parquet (or .csv)
                or bq://project.dataset.table; batch prediction jobs: a gs:// prefix or
                bq://project[.dataset].
            output_format: parquet or csv.
            key_column: Column identifying each row in the predictions; empty = the row
                number.
            max_rejected_fraction: Fail when more than this fraction of rows is rejected.
            max_drift: Fail when any feature column drifts on more than this fraction of
                rows; 1 disables the check.
            reject_unseen_categories: Reject rows with categories the model never saw.
            batch_rows: Rows per call of the model.
            bq_write_mode: For bq:// outputs: truncate or append.
            use_batch_prediction_job: Score with a Vertex AI BatchPredictionJob for the
                registered model instead of the in-pipeline step.
            batch_machine_type: The job's machine type.
            batch_accelerator_type: The job's GPU (NVIDIA_TESLA_T4, NVIDIA_L4...); empty:
                none.
            batch_accelerator_count: GPUs per job node.
            batch_max_replicas: Nodes the job may scale to.
        """
        with dsl.If(use_batch_prediction_job == True, name="batch-prediction-job"):  # noqa: E712
            configure(components["batch-predict-vertex"](
                registry_uri=registry_uri, model=model_name, model_version=model_version,
                model_alias=model_alias, data_uri=data_uri,
                output_uri=output_uri, pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                key_column=key_column, machine_type=batch_machine_type,
                accelerator_type=batch_accelerator_type,
                accelerator_count=batch_accelerator_count,
                max_replica_count=batch_max_replicas,
                **launchers.settings(profiles["batch-predict-vertex"]),
            ), "batch-predict-vertex")
        with dsl.Else(name="in-pipeline-scoring"):
            score(data_uri, model_name, model_version, model_alias, registry_uri, output_uri,
                  output_format, key_column, max_rejected_fraction, max_drift,
                  reject_unseen_categories, batch_rows, bq_write_mode)

    return prediction_pipeline_vertex


#: The pipeline as ``kfp.local`` runs it.
prediction_pipeline = build_prediction_pipeline("local")
