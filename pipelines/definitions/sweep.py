"""The sweep pipeline: prepare once -> trials in parallel -> best trial -> evaluate -> register.

``build_sweep_pipeline(target, compute, sweep)`` reuses the training pipeline's components
and compute helper: every trial is a ``train_model`` step with the ``train-model`` compute
profile (its own GPU), fanned out with ``dsl.ParallelFor(parallelism=parallel_trials)``.
``select_best_trial`` reads the trials' eval-split metrics through ``dsl.Collected`` and
hands the winner's model to the same evaluation, champion gate and registration as
training.

A failed trial must not fail the sweep. kfp 2.17's local runner aborts a ParallelFor at
its first failed iteration and fails the run even when a downstream task calls
``ignore_upstream_failure()``; on the backends, collecting the outputs of failed
iterations is not defined. So trials run ``train_model(continue_on_error=True)``: a
training error is logged and reported as the trial's result (a preemption still fails
the step, so its retry resumes from the trial's checkpoint), and the selection fails only
when every trial failed.

Each trial's checkpoints live under ``<root>/checkpoints/<run id>/<trial id>``: the trial
id is passed as the task name, the part of the checkpoint location that differs per task.

On Vertex AI with ``engine: vizier`` the trials run as one Vertex AI hyperparameter tuning
job instead (:mod:`gkeflow.pipelines.compute.engines.vizier`), then the same selection
logic, evaluation, gate and registration follow.
"""

import json
from collections.abc import Mapping
from typing import Any

from kfp import dsl

from gkeflow.components import (
    deploy_model,
    evaluate_model,
    fingerprint_data,
    prepare_data,
    register_model,
    train_model,
)
from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS
from gkeflow.components.sweep.hparams import GBDT_ONLY
from gkeflow.pipelines.compute import launchers
from gkeflow.pipelines.compute import lustre as lustre_mounts
from gkeflow.pipelines.compute.capacity import label_training_pod
from gkeflow.pipelines.compute.engines import kuberay, with_image
from gkeflow.pipelines.compute.engines.vizier import tuning_spec
from gkeflow.pipelines.compute.gcsfuse import apply_gcsfuse
from gkeflow.pipelines.compute.profiles import (
    ComputeError,
    ComputeProfile,
    apply_compute,
    validate_profiles,
)
from gkeflow.pipelines.compute.tpu_profile import training_image
from gkeflow.pipelines.compute.wording import plural
from gkeflow.pipelines.compute.workspace import PipelineStorage
from gkeflow.pipelines.definitions.deploy_stage import DEPLOY_STEP, deploy_stage
from gkeflow.pipelines.definitions.operations import Operations
from gkeflow.pipelines.definitions.preparation import (
    FANOUT_COMPONENTS,
    FANOUT_DISPLAY_NAMES,
    FANOUT_STEPS,
    ONE_POD,
    PreparationSettings,
    preparation_steps,
    prepare_stage,
)
from gkeflow.pipelines.definitions.stages import (
    GATE_PARAMETERS,
    evaluate_and_register,
    training_inputs,
)
from gkeflow.pipelines.definitions.sweep_trials import (
    TRIAL_STEP,
    fit_trial,
    ray_refusal,
    ray_step,
    uses_ray,
    uses_vizier,
)
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE, DEFAULT_REGISTRY_URIS
from gkeflow.pipelines.settings.gcsfuse_config import GcsFuseSettings
from gkeflow.pipelines.settings.lustre_config import LustreSettings
from gkeflow.pipelines.settings.platforms import platform
from gkeflow.pipelines.settings.sweep_config import SweepConfig, default_sweep, expand_trials
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings

PIPELINE_NAME = "gkeflow-sweep"
RAY_HEAD = "ray-head"  # a GKE Ray sweep's head pod: its compute, priced with the run
#: The steps that run or select the trials, one of them (with ray-head) per engine.
SELECTING_STEPS = {"select-best-trial", "tune-with-vizier", "tune-with-ray",
                   "tune-on-kuberay", RAY_HEAD}

#: The training steps' defaults plus the selection steps, in pipeline order. Trials use the
#: ``train-model`` profile, so ``compute: train-model`` in gkeflow.yaml sizes each trial.
SWEEP_COMPUTE: Mapping[str, ComputeProfile] = {
    # Preparation is cached on the data's run-time fingerprint, as in training.
    "fingerprint-data": DEFAULT_COMPUTE["fingerprint-data"],
    "prepare-data": DEFAULT_COMPUTE["prepare-data"],
    **FANOUT_STEPS,
    TRIAL_STEP: DEFAULT_COMPUTE[TRIAL_STEP],
    "select-best-trial": ComputeProfile(cpu="1", memory="4G", caching=False, timeout_s=1800),
    "tune-with-vizier": ComputeProfile(cpu="1", memory="2G", caching=False),
    # engine ray: the trials run inside this step, on a local Ray instance
    "tune-with-ray": ComputeProfile(cpu="2", memory="8G", caching=False),
    # engine ray on GKE: this step launches a RayJob (a Ray head, and the trials on
    # train-model's compute) and follows it
    "tune-on-kuberay": ComputeProfile(cpu="1", memory="2G", caching=False),
    RAY_HEAD: ComputeProfile(cpu=kuberay.HEAD_CPU, memory=kuberay.HEAD_MEMORY),
    "evaluate-model": DEFAULT_COMPUTE["evaluate-model"],
    "register-model": DEFAULT_COMPUTE["register-model"],
    DEPLOY_STEP: DEFAULT_COMPUTE[DEPLOY_STEP],
}

STEP_DISPLAY_NAMES = {
    "fingerprint-data": "Fingerprint data",
    "prepare-data": "Prepare data",
    **FANOUT_DISPLAY_NAMES,
    "train-model": "Train trial",
    "select-best-trial": "Select best trial",
    "tune-with-vizier": "Tune with Vertex AI Vizier",
    "tune-with-ray": "Tune with Ray",
    "tune-on-kuberay": "Tune with Ray on KubeRay",
    "evaluate-model": "Evaluate best trial",
    "register-model": "Register best trial",
    DEPLOY_STEP: "Deploy best trial",
}


def _components() -> dict[str, Any]:
    from gkeflow.components.sweep.component import select_best_trial
    from gkeflow.components.sweep.ray_component import tune_with_ray
    from gkeflow.components.sweep.rayjob_component import tune_on_kuberay
    from gkeflow.components.sweep.vizier_component import tune_with_vizier

    return {"fingerprint-data": fingerprint_data, "prepare-data": prepare_data,
            "train-model": train_model,
            "select-best-trial": select_best_trial, "tune-with-vizier": tune_with_vizier,
            "tune-with-ray": tune_with_ray, "tune-on-kuberay": tune_on_kuberay,
            "evaluate-model": evaluate_model, "register-model": register_model,
            DEPLOY_STEP: deploy_model, **FANOUT_COMPONENTS}


def step_images(profiles: Mapping[str, ComputeProfile] | None = None) -> dict[str, str]:
    """Step -> the image its component runs in; with ``profiles``, trials on a TPU slice run
    in the TPU image."""
    images = {step: c.component_spec.implementation.container.image
              for step, c in _components().items()}
    if profiles and TRIAL_STEP in profiles:
        images[TRIAL_STEP] = training_image(profiles[TRIAL_STEP])
        if RAY_HEAD in profiles:  # the Ray head runs the trials' image too
            images[RAY_HEAD] = images[TRIAL_STEP]
    return images


def resolve_sweep_compute(target: str, compute: Mapping[str, ComputeProfile] | None = None,
                          engine: str = "kfp", preparation: PreparationSettings = ONE_POD,
                          sweep: SweepConfig | None = None) -> dict[str, ComputeProfile]:
    """The sweep's per-step profiles (its defaults, then ``compute``), validated for ``target``.

    A Ray sweep on GKE also holds its Ray cluster, so plan and budgets price it: ``ray-head``
    and ``train-model`` as the trial workers (``replicas``: trials at once, ``timeout_s``:
    the sweep's deadline, a trial's for each wave of trials).
    """
    from gkeflow.components.images import IMAGES

    unknown = sorted(set(compute or {}) - set(SWEEP_COMPUTE))
    if unknown:
        raise ComputeError(f"unknown {plural(len(unknown), 'step')} {', '.join(unknown)}; "
                           f"steps are {', '.join(SWEEP_COMPUTE)}")
    profiles = {**SWEEP_COMPUTE, **(compute or {})}
    profiles[TRIAL_STEP] = fit_trial(target, engine, profiles[TRIAL_STEP])[0]
    if problem := ray_refusal(target, engine):
        raise ComputeError(problem)
    for step in SELECTING_STEPS - _selecting_steps(target, engine):
        profiles.pop(step)
    if RAY_HEAD in profiles:  # a GKE Ray sweep: its cluster, priced with the run
        sweep = sweep or default_sweep()
        profiles.update(kuberay.cluster_profiles(
            profiles[TRIAL_STEP], profiles[RAY_HEAD], profiles["tune-on-kuberay"],
            sweep.trial_count(), sweep.parallel_trials, (TRIAL_STEP, RAY_HEAD,
                                                         "tune-on-kuberay")))
    for step in {"prepare-data", *FANOUT_STEPS} - preparation_steps(preparation):
        profiles.pop(step)
    gpu_images = {step: IMAGES.get(image) for step, image in step_images(profiles).items()}
    gpu_images[DEPLOY_STEP] = None  # its GPU serves in the serving runtime's image
    validate_profiles(profiles, target, gpu_images)
    return profiles


def _selecting_steps(target: str, engine: str) -> set[str]:
    """The steps that run or select this sweep's trials (of :data:`SELECTING_STEPS`)."""
    if uses_vizier(target, engine):
        return {"tune-with-vizier"}
    if uses_ray(target, engine):
        return {ray_step(target), RAY_HEAD} if platform(target).kubernetes else {ray_step(target)}
    return {"select-best-trial"}


def build_sweep_pipeline(target: str = "local",
                         compute: Mapping[str, ComputeProfile] | None = None,
                         sweep: SweepConfig | None = None,
                         workspace: WorkspaceSettings | None = None,
                         preparation: PreparationSettings = ONE_POD,
                         operations: Operations | None = None,
                         gcsfuse: GcsFuseSettings | None = None,
                         lustre: LustreSettings | None = None):
    """Define ``sweep_pipeline`` for ``target``: trials expanded from ``sweep`` (default:
    :func:`default_sweep`), each step's compute validated and applied; on GKE without a
    gs:// root, shards and trial checkpoints live in the run's ``workspace``; the data is
    prepared in one pod or fanned out (``preparation``); ``gcsfuse`` buckets and ``lustre``
    instances are mounted in the steps that use them."""
    if problem := lustre_mounts.check_target(lustre, target):
        raise ComputeError(problem)
    sweep = sweep or default_sweep()
    if problem := ray_refusal(target, sweep.engine):
        raise ComputeError(problem)
    storage = PipelineStorage(target, workspace)
    vizier = uses_vizier(target, sweep.engine)
    ray = uses_ray(target, sweep.engine)
    if ray and platform(target).local:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise ComputeError("sweep.engine ray needs Ray Tune, which is not installed here: "
                               "pip install 'gkeflow[ray]', or set sweep.engine kfp")
    profiles = resolve_sweep_compute(target, compute, sweep.engine, preparation, sweep)
    trials_default = expand_trials(sweep)
    tuned = ",".join(sweep.tuned)
    if platform(target).managed:
        from gkeflow.components.register.vertex_component import register_model as register_step
    else:
        register_step = register_model
    operations = (operations or Operations(target)).priced(profiles)
    default_registry_uri = operations.registry_default(
        DEFAULT_REGISTRY_URIS.get(target, DEFAULT_REGISTRY_URIS["local"]))
    require_gpu = platform(target).cloud and profiles[TRIAL_STEP].uses_gpu
    components = _components()

    def configure(task: dsl.PipelineTask, step: str) -> dsl.PipelineTask:
        task.set_display_name(STEP_DISPLAY_NAMES[step])
        operations.track(task, step, PIPELINE_NAME)
        apply_gcsfuse(task, step, gcsfuse, target)
        lustre_mounts.apply_lustre(task, step, lustre, target)
        return apply_compute(task, profiles[step], target, step)

    @dsl.pipeline(name=PIPELINE_NAME,
                  pipeline_config=operations.pipeline_config(storage.config()))
    @operations.wrap(PIPELINE_NAME)
    def sweep_pipeline(
        data_uri: str = EMBEDDED_PENGUINS,
        label_column: str = "species",
        task: str = "auto",
        train_ratio: float = 0.7,
        eval_ratio: float = 0.15,
        test_ratio: float = 0.15,
        trials: list = trials_default,
        metric: str = sweep.metric,
        direction: str = sweep.direction,
        epochs: int = 20,
        batch_size: int = 32,
        learning_rate: float = 0.01,
        model_type: str = "mlp",
        hidden_units: str = "256,128",
        dropout: float = 0.1,
        early_stopping_patience: int = 5,
        user_module: str = "",
        backend: str = "auto",
        model_name: str = "penguins-classifier",
        min_accuracy: float = 0.8,
        registry_uri: str = default_registry_uri,
        comparison_metric: str = "accuracy",
        regression_tolerance: float = 0.01,
        baseline_margin: float = 0.05,
        thresholds: str = "",
        slice_columns: str = "",
        positive_class: str = "",
        checkpoint_uri: str = "",
        key_column: str = "",
        exclude_columns: str = "",
        feature_columns: str = "",
        shard_root: str = "",
        prepare_groups: int = preparation.groups,
        max_rejected_fraction: float = 0.1,
        deploy: bool = False,
        deploy_traffic: int = 10,
        deploy_settings: str = "",
    ):
        """Trains one model per trial in parallel, then evaluates and registers the best.

        Args:
            data_uri: CSV to train on; embedded://penguins is the bundled Palmer Penguins data.
            label_column: Column holding the class (or the number) to predict.
            task: auto, classification or regression (see the training pipeline); a
                regression sweep compares trials on eval_loss or eval_rmse, lower better.
            train_ratio: Fraction of rows for training.
            eval_ratio: Fraction of rows for validation; trials are compared on it.
            test_ratio: Fraction of rows held out for the final evaluation of the best trial.
            trials: One dict per trial: trial_id and the searched hyperparameters
                (`sweep:` in gkeflow.yaml generates them; every trial has the same keys).
            metric: Eval-split metric the trials are compared on: eval_accuracy or eval_loss.
            direction: maximize or minimize the metric.
            epochs: Maximum passes over the training split, unless searched.
            batch_size: Examples per gradient step, unless searched.
            learning_rate: Adam learning rate, unless searched.
            model_type: Built-in model family (mlp or wide_deep), unless searched.
            hidden_units: Hidden layer sizes, comma-separated, unless searched.
            dropout: Dropout rate after each hidden layer, unless searched.
            early_stopping_patience: Epochs without eval-loss improvement before a trial
                stops (0 = off), unless searched.
            user_module: Your own model: a module with build_model(schema, hparams);
                empty = built-in.
            backend: Keras backend of the trials: auto (JAX on a TPU, TensorFlow
                elsewhere), tensorflow or jax (ParallelFor trials; Vizier's run auto).
            model_name: Name under which the best model is registered.
            min_accuracy: Test accuracy required before the best model is registered.
            registry_uri: Model registry: sqlite:///<path> (embedded),
                vertex://projects/<p>/locations/<l> or kubeflow://host:port.
            comparison_metric: Metric on which the best model must not regress against the
                registry's champion.
            regression_tolerance: How far the best model may fall behind the champion.
            baseline_margin: A regressor's test RMSE must be this fraction below the mean
                predictor's to be registered (0.05: 5% below); 0 = not worse than it.
            thresholds: Further absolute requirements, e.g. "f1_macro>=0.8"; empty for none.
            slice_columns: Categorical columns to slice test metrics by, comma-separated.
            positive_class: Class whose ROC curve is shown; empty means the last label.
            checkpoint_uri: Where trial checkpoints go (gs://bucket/path or a mounted
                directory); empty = under a gs:// pipeline root, else the run's workspace.
            key_column: Column whose stable hash assigns rows to splits; not a feature.
            exclude_columns: Columns never used as features, comma-separated.
            feature_columns: The only feature columns, comma-separated; empty: inferred.
            shard_root: gs:// prefix for the prepared shards; empty: next to the dataset
                artifact on a gs:// or local root, in the run's workspace on GKE otherwise.
            prepare_groups: With fan-out preparation (gkeflow.yaml preparation.fanout):
                the most parallel groups of input files (or bq:// row ranges); else unused.
            max_rejected_fraction: Fail preparation when more than this fraction of rows is
                rejected (unparseable or invalid).
            deploy: Serve the registered best model (behind a servability check) on the
                target's endpoint: Vertex AI Endpoint, KServe InferenceService or the
                local stand-in.
            deploy_traffic: Percent of requests the new version gets (canary, 1-100); the
                first version of an endpoint gets 100.
            deploy_settings: gkeflow.yaml deploy: settings as JSON (endpoint, keep,
                replicas, KServe mode, namespace, storage_root); empty for the defaults.
        """
        scope = locals()
        gate = {name: scope[name] for name in GATE_PARAMETERS}
        fingerprint, dataset, schema = prepare_stage(
            configure, settings=preparation, scope=scope, workspace_path=storage.path)
        if ray:
            step = ray_step(target)
            on_gke = {} if platform(target).local else {
                "rayjob_template": kuberay.template_json(
                    profiles[TRIAL_STEP], profiles[RAY_HEAD],
                    training_image(profiles[TRIAL_STEP]), target), "trial_resources": json.dumps(
                    kuberay.trial_resources(profiles[TRIAL_STEP]), sort_keys=True),
                "pipeline_root": dsl.PIPELINE_ROOT_PLACEHOLDER,
                "pipeline_run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                **launchers.settings(profiles[step])}
            best = configure(components[step](
                dataset=dataset, schema=schema, trials=trials, metric=metric,
                direction=direction, tuned=tuned, scheduler=sweep.scheduler,
                parallel_trials=sweep.parallel_trials, grace_epochs=sweep.grace_epochs,
                epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                model_type=model_type, hidden_units=hidden_units, dropout=dropout,
                early_stopping_patience=early_stopping_patience, user_module=user_module,
                backend=backend, search="bayesian" if sweep.algorithm == "bayesian"
                else "fixed", search_space=_search_space(sweep), seed=sweep.seed, **on_gke,
            ), step)
        elif vizier:
            best = configure(components["tune-with-vizier"](
                dataset=dataset, schema=schema,
                trials=trials, metric=metric, direction=direction, tuned=tuned,
                epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                model_type=model_type, hidden_units=hidden_units, dropout=dropout,
                early_stopping_patience=early_stopping_patience,
                user_module=user_module, require_gpu=require_gpu,
                spec=tuning_spec(sweep, profiles[TRIAL_STEP]),
                trial_image=training_image(profiles[TRIAL_STEP]),
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
                **launchers.settings(profiles["tune-with-vizier"]),
            ), "tune-with-vizier")
        else:
            # trials on a single-host TPU slice run in the TPU image
            trial_model = with_image(train_model, training_image(profiles[TRIAL_STEP]))
            with dsl.ParallelFor(items=trials, parallelism=sweep.parallel_trials,
                                 name="trials") as trial:
                fixed = {"epochs": epochs, "batch_size": batch_size,
                         "learning_rate": learning_rate, "model_type": model_type,
                         "hidden_units": hidden_units, "dropout": dropout,
                         "early_stopping_patience": early_stopping_patience}
                hparams = {name: getattr(trial, name) if name in sweep.parameters else value
                           for name, value in fixed.items()}
                # the trees' settings a trial searches (the others keep train-model's)
                hparams.update({name: getattr(trial, name) for name in sweep.parameters
                                if name in GBDT_ONLY})
                train = configure(trial_model(
                    dataset=dataset,
                    schema=schema,
                    **hparams,
                    user_module=user_module,
                    require_gpu=require_gpu,
                    checkpoint_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    task_name=trial.trial_id,
                    checkpoint_uri=checkpoint_uri,
                    continue_on_error=True,
                    workspace_path=storage.path,
                    backend=backend,
                ), TRIAL_STEP)
                if platform(target).kubernetes:
                    label_training_pod(train)
            best = configure(components["select-best-trial"](
                trials=trials,
                reports=dsl.Collected(train.outputs["Output"]),
                models=dsl.Collected(train.outputs["model"]),
                metric=metric,
                direction=direction,
                tuned=tuned,
            ), "select-best-trial")
        evaluate_and_register(
            configure, register_step, dataset=dataset,
            schema=schema, model=best.outputs["best_model"], gate=gate,
            data_uri=data_uri, workspace_path=storage.path, labels=best.outputs["labels"],
            training_inputs=(f"{training_inputs(scope, fingerprint)};trials={trials};"
                             f"metric={metric};direction={direction};hidden_units="
                             f"{hidden_units};dropout={dropout};early_stopping_patience="
                             f"{early_stopping_patience};best={best.outputs['labels']}"),
            deploy=deploy_stage(target, profiles[DEPLOY_STEP], scope),
        )

    return sweep_pipeline


def _search_space(sweep: SweepConfig) -> str:
    """The search space a Bayesian search samples (JSON); "" for the fixed trials."""
    if sweep.algorithm != "bayesian":
        return ""
    return json.dumps(sweep.model_dump()["parameters"], sort_keys=True)


def sweep_plan(sweep: SweepConfig, profiles: Mapping[str, ComputeProfile]) -> dict[str, int]:
    """Trial count, GPUs per trial and the most GPUs in use at once."""
    trials = sweep.trial_count()
    per_trial = profiles[TRIAL_STEP].accelerator_count if profiles[TRIAL_STEP].uses_gpu else 0
    at_once = min(sweep.parallel_trials, trials)
    return {"trials": trials, "parallel_trials": at_once, "gpus_per_trial": per_trial,
            "max_gpus_at_once": per_trial * at_once}
