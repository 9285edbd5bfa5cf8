"""``tracking.<env>`` compiled into a pipeline: MLflow direct mode (without the plugin) and,
on GKE, Vertex AI Experiments through each step (:mod:`gkeflow.components.tracking.vertex_run`).

Each tracked step gets the tracking server, the experiment and the run's page as
environment variables, the run's id and name (:func:`add_run_identity`; never as inputs,
which would change the cache keys), and credentials by reference only: a Kubernetes Secret
on GKE, a Secret Manager secret's name on Vertex AI. No value of a secret is ever compiled
in.

The exit task (:func:`ends_tracking`, :func:`track_exit_task`) gives the parent MLflow run and
the Vertex AI experiment run the run's final state, and adds a Vertex AI run (scheduled
ones too) to its experiment (:mod:`gkeflow.components.tracking.run_end`).

With the registry default (:func:`registry_default`), a pipeline whose environment tracks in
MLflow registers into that server's MLflow Model Registry unless a registry is named.
"""

from __future__ import annotations

from kfp import dsl

from gkeflow.components.tracking import handoff
from gkeflow.components.tracking import pipeline_run as names
from gkeflow.pipelines.definitions.candidates_stage import CANDIDATE_STEPS
from gkeflow.pipelines.settings.platforms import platform
from gkeflow.pipelines.settings.tracking_config import (
    GKE_SECRET_KEYS,
    MlflowTracking,
    TrackingSettings,
    mlflow_registry_uri,
)

#: Where a Kubeflow Pipelines pod finds its run's id and name (the backend labels and
#: annotates every pod of a run).
RUN_ID_FIELD = "metadata.labels['pipeline/runid']"
RUN_NAME_FIELD = "metadata.annotations['pipelines.kubeflow.org/run_name']"
#: Steps whose code logs to MLflow (gkeflow.components.tracking.steps, .sweep, .handoff).
TRACKED_STEPS = frozenset({"fingerprint-data", "prepare-data", "merge-prepared", "train-model",
                           *CANDIDATE_STEPS,
                           "select-best-trial", "tune-with-vizier", "tune-with-ray",
                           "tune-on-kuberay", "evaluate-model",
                           "register-model", "deploy-model", "predict-batch",
                           "report-predictions"})
#: The Vertex AI CustomJob launcher (train-model beyond one pipeline step): not a Python
#: step, but it reads the same settings and accepts the run-identity arguments.
VERTEX_LAUNCHER_MODULE = "gkeflow.components.scaleout.vertex_launcher"


#: The pipeline whose train-model writes its curves to the experiment's TensorBoard.
CURVES_PIPELINE = "gkeflow-training"


def direct_mlflow(tracking: TrackingSettings | None) -> MlflowTracking | None:
    """The MLflow settings a compiled pipeline carries: only with a tracking URI."""
    mlflow = tracking.mlflow if tracking is not None else None
    return mlflow if mlflow is not None and mlflow.tracking_uri else None


def registry_default(tracking: TrackingSettings | None, fallback: str) -> str:
    """The pipeline's default ``registry_uri``: the tracking server's MLflow Model Registry
    when the environment tracks in MLflow (with a tracking URI), else ``fallback``."""
    mlflow = direct_mlflow(tracking)
    return mlflow_registry_uri(mlflow.tracking_uri) if mlflow is not None else fallback


def is_python_step(task: dsl.PipelineTask) -> bool:
    """A lightweight Python component (its executor reads extra arguments leniently)."""
    spec = task.container_spec
    return spec is not None and "kfp.dsl.executor_main" in " ".join(spec.command or [])


def tracks_itself(task: dsl.PipelineTask) -> bool:
    """A step whose code can take the tracking settings: a Python step, or the Vertex AI
    CustomJob launcher (which hands the run on to the job's chief)."""
    spec = task.container_spec
    return is_python_step(task) or (
        spec is not None and VERTEX_LAUNCHER_MODULE in " ".join(spec.command or []))


def add_run_identity(task: dsl.PipelineTask, target: str) -> None:
    """Give ``task`` its pipeline run's id and name without making them inputs (which would
    change its cache key on every run). Kubeflow Pipelines resolves the pipeline-job
    placeholders only as input values, so on GKE they come from the pod's own metadata;
    Vertex AI and kfp.local resolve them in the container's arguments."""
    if platform(target).kubernetes:
        from kfp import kubernetes

        kubernetes.use_field_path_as_env(task, names.ENV_RUN_ID_FIELD, RUN_ID_FIELD)
        kubernetes.use_field_path_as_env(task, names.ENV_RUN_NAME_FIELD, RUN_NAME_FIELD)
        return
    task.container_spec.args = [
        *(task.container_spec.args or []),
        names.ARG_RUN_ID, dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        names.ARG_RUN_NAME, dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
    ]


def track_task(task: dsl.PipelineTask, step: str, tracking: TrackingSettings | None,
               target: str, pipeline: str, run_url_template: str = "",
               vertex_target=None) -> dsl.PipelineTask:
    """``task`` with what its step needs to track itself: in MLflow (with a tracking URI) and,
    on GKE with ``vertex_target`` (gkeflow.yaml's ``targets.vertex``), in Vertex AI
    Experiments; unchanged when the step logs nothing or nothing is to be tracked."""
    mlflow = direct_mlflow(tracking)
    experiments = tracking.vertex_experiments if tracking is not None else None
    if not platform(target).kubernetes or vertex_target is None:
        experiments = None  # Vertex AI runs are submitted into it; local runs log at the end
    if (mlflow is None and experiments is None) or step not in TRACKED_STEPS \
            or not tracks_itself(task):
        return task
    add_run_identity(task, target)
    if experiments is not None:
        _set_vertex_experiment(task, experiments.experiment, vertex_target)
        # the training run's curves, epoch by epoch (a sweep's trials would share one run)
        if experiments.tensorboard and step == "train-model" and pipeline == CURVES_PIPELINE:
            from gkeflow.components.tracking import vertex_run

            task.set_env_variable(vertex_run.ENV_TENSORBOARD, experiments.tensorboard)
    if mlflow is not None:
        _set_mlflow(task, mlflow, target, pipeline, run_url_template)
    return task


def _set_vertex_experiment(task: dsl.PipelineTask, experiment: str, vertex_target) -> None:
    from gkeflow.components.tracking import vertex_run

    task.set_env_variable(vertex_run.ENV_EXPERIMENT, experiment)
    task.set_env_variable(vertex_run.ENV_PROJECT, vertex_target.project)
    task.set_env_variable(vertex_run.ENV_LOCATION, vertex_target.region)
    if vertex_target.api_endpoint:
        task.set_env_variable(vertex_run.ENV_ENDPOINT, vertex_target.api_endpoint)


def _set_mlflow(task: dsl.PipelineTask, mlflow: MlflowTracking, target: str, pipeline: str,
                run_url_template: str) -> None:
    """The server, experiment, run page and credentials (by reference) of direct mode."""
    task.set_env_variable(names.ENV_URI, mlflow.tracking_uri)
    task.set_env_variable(names.ENV_EXPERIMENT, mlflow.experiment)
    task.set_env_variable(names.ENV_PIPELINE, pipeline)
    task.set_env_variable(names.ENV_TARGET, target)
    if run_url_template:
        task.set_env_variable(names.ENV_RUN_URL, run_url_template)
    credentials = mlflow.credentials
    if platform(target).kubernetes and credentials.gke_secret:
        from kfp import kubernetes

        kubernetes.use_secret_as_env(task, secret_name=credentials.gke_secret,
                                     secret_key_to_env=dict(GKE_SECRET_KEYS), optional=True)
        # its name, for a launcher to give a JobSet's pods the same keys by reference
        task.set_env_variable(handoff.ENV_GKE_SECRET, credentials.gke_secret)
    if platform(target).managed and credentials.vertex_secret:
        task.set_env_variable(names.ENV_TOKEN_SECRET, credentials.vertex_secret)


def ends_tracking(tracking: TrackingSettings | None, target: str, vertex_target=None) -> bool:
    """Whether a pipeline compiled for ``target`` needs the exit task that writes the run's
    end into its trackers: MLflow direct mode, or a Vertex AI experiment (GKE and Vertex AI
    alike need ``targets.vertex``); local runs are ended by ``gkeflow run`` itself."""
    if not platform(target).cloud or tracking is None:
        return False
    return direct_mlflow(tracking) is not None or (
        tracking.vertex_experiments is not None and vertex_target is not None)


def track_exit_task(task: dsl.PipelineTask, tracking: TrackingSettings | None, target: str,
                    pipeline: str, run_url_template: str = "",
                    vertex_target=None) -> dsl.PipelineTask:
    """The exit task ``task`` (``end_tracking`` or ``notify_run``, which take the run's id and
    name as inputs) with the tracking settings of :func:`track_task`; on Vertex AI also the
    experiment, which the task adds the run to."""
    if not ends_tracking(tracking, target, vertex_target):
        return task
    experiments = tracking.vertex_experiments if vertex_target is not None else None
    if experiments is not None:
        _set_vertex_experiment(task, experiments.experiment, vertex_target)
    mlflow = direct_mlflow(tracking)
    if mlflow is not None:
        _set_mlflow(task, mlflow, target, pipeline, run_url_template)
    return task
