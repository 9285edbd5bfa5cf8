"""The training pipeline: prepare -> train -> evaluate -> (blessed?) -> register.

One definition, built for a target: :func:`build_training_pipeline` is called with
``"local"`` for ``kfp.local`` runs and with ``"gke"`` / ``"vertex"`` by the compiler,
so the pipeline that runs locally is the very one that is compiled.
"""


from collections.abc import Mapping
from typing import Optional

from kfp import dsl

from gkeflow.components import register_model, train_model
from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS
from gkeflow.components.train.families import DEFAULT_CANDIDATES
from gkeflow.pipelines.compute import lustre as lustre_mounts
from gkeflow.pipelines.compute.capacity import label_training_pod
from gkeflow.pipelines.compute.checkpoints import add_checkpoint_volume
from gkeflow.pipelines.compute.engines import training_engine, with_image
from gkeflow.pipelines.compute.gcsfuse import apply_gcsfuse, check_engine, mount_env
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile, apply_compute
from gkeflow.pipelines.compute.tpu_profile import training_image
from gkeflow.pipelines.compute.workspace import PipelineStorage
from gkeflow.pipelines.definitions import candidates_stage
from gkeflow.pipelines.definitions.deploy_stage import DEPLOY_STEP, deploy_stage
from gkeflow.pipelines.definitions.operations import Operations
from gkeflow.pipelines.definitions.preparation import (
    FANOUT_DISPLAY_NAMES,
    ONE_POD,
    PreparationSettings,
    prepare_stage,
)
from gkeflow.pipelines.definitions.stages import (
    GATE_PARAMETERS,
    evaluate_and_register,
    training_inputs,
)
from gkeflow.pipelines.definitions.training_compute import (
    CANDIDATE_COMPUTE,
    DEFAULT_COMPUTE,
    STEP_COMPONENTS,
    TRAIN_PROFILE,
    resolve_compute,
    step_images,
)
from gkeflow.pipelines.settings.gcsfuse_config import GcsFuseSettings
from gkeflow.pipelines.settings.lustre_config import LustreSettings
from gkeflow.pipelines.settings.platforms import platform
from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings

__all__ = ["CANDIDATE_COMPUTE", "DEFAULT_COMPUTE", "DEFAULT_REGISTRY_URIS", "PIPELINE_NAME",
           "STEP_COMPONENTS", "STEP_DISPLAY_NAMES", "TRAIN_PROFILE", "build_training_pipeline",
           "resolve_compute", "step_images", "training_pipeline"]

PIPELINE_NAME = "gkeflow-training"

#: Where each target registers models unless the run says otherwise: the embedded registry
#: locally, the in-cluster Kubeflow Model Registry on GKE. Vertex AI runs pass
#: ``registry_uri=vertex://projects/<project>/locations/<location>``.
DEFAULT_REGISTRY_URIS: Mapping[str, str] = {
    "local": "sqlite:///gkeflow-registry.db",
    "gke": "kubeflow://model-registry-service.kubeflow.svc.cluster.local:8080",
    "vertex": "sqlite:///gkeflow-registry.db",
}

STEP_DISPLAY_NAMES = {
    "fingerprint-data": "Fingerprint data",
    "prepare-data": "Prepare data",
    "train-model": "Train model",
    "evaluate-model": "Evaluate model",
    "register-model": "Register model",
    **candidates_stage.display_names(),
    DEPLOY_STEP: "Deploy model",
    **FANOUT_DISPLAY_NAMES,
}


def build_training_pipeline(
    target: str = "local", compute: Optional[Mapping[str, ComputeProfile]] = None,
    workspace: Optional[WorkspaceSettings] = None,
    preparation: PreparationSettings = ONE_POD, operations: Optional[Operations] = None,
    gcsfuse: Optional[GcsFuseSettings] = None, lustre: Optional[LustreSettings] = None,
    families: tuple[str, ...] = DEFAULT_CANDIDATES,
):
    """Define ``training_pipeline``, each step's compute validated and applied for ``target``.

    ``families``: the model families runs train (see
    :func:`~gkeflow.components.train.families.trained_families`): several train in tasks of
    their own, side by side, for ``train-model`` to choose from (:mod:`candidates_stage`).

    ``workspace``: the run's volume on GKE (see :mod:`gkeflow.pipelines.compute.workspace`); by
    default one for the default MinIO root, where shards and checkpoints then live.
    ``preparation``: one pod (default) or fan-out (see
    :mod:`gkeflow.pipelines.definitions.preparation`).
    ``gcsfuse``, ``lustre``: buckets and Managed Lustre instances mounted in the steps that
    use them (see :mod:`gkeflow.pipelines.compute.gcsfuse`, ``compute.lustre``).
    """
    profiles = resolve_compute(target, compute, preparation, families)
    parallel = [family for family in families
                if candidates_stage.candidate_step(family) in profiles]
    if problem := lustre_mounts.check_target(lustre, target):
        raise ComputeError(problem)
    if platform(target).managed:  # same step, with a google.VertexModel output for Vertex lineage
        from gkeflow.components.register.vertex_component import register_model as register_step
    else:
        register_step = register_model
    operations = (operations or Operations(target)).priced(profiles)
    default_registry_uri = operations.registry_default(
        DEFAULT_REGISTRY_URIS.get(target, DEFAULT_REGISTRY_URIS["local"]))

    def configure(task: dsl.PipelineTask, step: str,
                  profile: Optional[ComputeProfile] = None) -> dsl.PipelineTask:
        task.set_display_name(STEP_DISPLAY_NAMES[step])
        operations.track(task, step, PIPELINE_NAME)
        if profile is None:  # a launcher (``profile``: its own) mounts nothing: its job does
            # a candidate reads what train-model would, through train-model's mounts
            mounted = "train-model" if step in candidates_stage.CANDIDATE_STEPS else step
            apply_gcsfuse(task, mounted, gcsfuse, target)
            lustre_mounts.apply_lustre(task, mounted, lustre, target)
        return apply_compute(task, profile or profiles[step], target, step)

    # Training beyond one pod (several machines, Spot/flex-start on Vertex AI) goes through
    # the target's engine: a Vertex AI CustomJob, a GKE JobSet or local worker processes.
    train_engine = None if parallel else training_engine(target, profiles["train-model"])
    if problem := (check_engine(gcsfuse, target, train_engine is not None)
                   or lustre_mounts.check_engine(lustre, target, train_engine is not None)):
        raise ComputeError(problem)
    try:
        storage = PipelineStorage(target, workspace,
                                  jobset=platform(target).kubernetes and train_engine is not None)
    except ValueError as exc:
        raise ComputeError(str(exc)) from exc

    def train_step(**arguments) -> dsl.PipelineTask:
        if train_engine is None:
            # a single-host TPU slice on GKE is one pod, in the TPU image
            trainer = with_image(train_model, training_image(profiles["train-model"]))
            task = configure(trainer(**arguments, workspace_path=storage.path),
                             "train-model")
            if platform(target).kubernetes:
                label_training_pod(task)
            if platform(target).kubernetes and storage.checkpoint_volume:
                # The default MinIO root cannot hold checkpoints: a volume can.
                add_checkpoint_volume(task)
            return task
        profile = profiles["train-model"]
        # the job's own containers see the buckets (Vertex AI mounts them at /gcs/)
        env = mount_env(gcsfuse, "train-model", target)
        return configure(train_engine.task(profile, arguments, env=env), "train-model",
                         train_engine.launcher_profile(profile))

    @dsl.pipeline(name=PIPELINE_NAME,
                  pipeline_config=operations.pipeline_config(storage.config()))
    @operations.wrap(PIPELINE_NAME)
    def training_pipeline(
        data_uri: str = EMBEDDED_PENGUINS,
        label_column: str = "species",
        task: str = "auto",
        train_ratio: float = 0.7,
        eval_ratio: float = 0.15,
        test_ratio: float = 0.15,
        epochs: int = 20,
        batch_size: int = 32,
        learning_rate: float = 0.01,
        early_stopping_patience: int = 5,
        loss: str = "auto",
        label_transform: str = "none",
        backend: str = "auto",
        model_type: str = "auto",
        candidates: str = "",
        user_module: str = "",
        gbdt_rounds: int = 2000,
        gbdt_learning_rate: float = 0.05,
        gbdt_max_depth: int = 6,
        gbdt_min_child_weight: float = 1.0,
        gbdt_subsample: float = 1.0,
        gbdt_colsample_bytree: float = 1.0,
        gbdt_reg_lambda: float = 1.0,
        gbdt_early_stopping_rounds: int = 100,
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
        """Trains a TensorFlow classifier or regressor on tabular data and registers it when
        evaluation blesses it.

        Args:
            data_uri: CSV to train on; embedded://penguins is the bundled Palmer Penguins data.
            label_column: Column holding the class (or the number) to predict.
            task: auto (numbers with many distinct values: regression; text, true/false or
                few whole numbers: classification), classification or regression.
            train_ratio: Fraction of rows for training.
            eval_ratio: Fraction of rows for validation during training.
            test_ratio: Fraction of rows held out for the final evaluation.
            epochs: Passes over the training split.
            batch_size: Examples per gradient step.
            learning_rate: Adam learning rate.
            early_stopping_patience: Epochs without eval-loss improvement before training
                stops (best weights restored); 0 = train every epoch.
            loss: Regression loss on the standardised label: auto (mse), mse or huber.
            label_transform: Regression: none, or log for a skewed positive label.
            backend: Keras backend of train-model: auto (JAX on a TPU, TensorFlow
                elsewhere), tensorflow or jax; both export the same SavedModel.
            model_type: auto (default: train the candidates, keep the one with the best
                eval-split metric), or one family: mlp or wide_deep (Keras), gbdt
                (gradient-boosted trees with XGBoost, on train-model's GPU when it has one)
                or linear (ridge or logistic regression).
            candidates: model_type auto: the families tried, comma-separated (gbdt, mlp,
                wide_deep, linear, user); empty = gbdt, mlp, linear, and user with a
                user_module.
            user_module: Your own model: a module with build_model(schema, hparams);
                empty = built-in.
            gbdt_rounds: gbdt: most boosting rounds.
            gbdt_learning_rate: gbdt: shrinkage of each round (XGBoost's eta).
            gbdt_max_depth: gbdt: deepest tree.
            gbdt_min_child_weight: gbdt: least hessian weight in a leaf.
            gbdt_subsample: gbdt: fraction of rows each tree sees.
            gbdt_colsample_bytree: gbdt: fraction of features each tree sees.
            gbdt_reg_lambda: gbdt: L2 regularisation of leaf values.
            gbdt_early_stopping_rounds: gbdt: rounds without eval-loss improvement before
                boosting stops (the best round is kept); 0 = off.
            model_name: Name under which the model is registered.
            min_accuracy: Test accuracy a classifier needs before it is registered (a
                regressor must beat the mean predictor's RMSE by baseline_margin).
            registry_uri: Model registry: sqlite:///<path> (embedded),
                vertex://projects/<p>/locations/<l> or kubeflow://host:port.
            comparison_metric: Metric on which the new model must not regress against the
                registry's champion (accuracy, precision_macro, recall_macro, f1_macro,
                log_loss, roc_auc, pr_auc or ece).
            regression_tolerance: How far the new model may fall behind the champion on
                comparison_metric and still be registered.
            baseline_margin: A regressor's test RMSE must be this fraction below the mean
                predictor's to be registered (0.05: 5% below); 0 = not worse than it.
            thresholds: Further absolute requirements, comma-separated, e.g.
                "f1_macro>=0.8,log_loss<=0.5"; empty for none.
            slice_columns: Categorical columns to slice test metrics by, comma-separated;
                empty slices by every categorical feature with at most 20 values.
            positive_class: Class whose ROC curve is shown; empty means the last label.
            checkpoint_uri: Where training checkpoints go (gs://bucket/path or a mounted
                directory); empty = under a gs:// pipeline root, else the run's volume.
            key_column: Column whose stable hash assigns rows to splits (rows sharing a
                key share a split); its role is key, not a feature. Empty: hash of the whole row.
            exclude_columns: Columns never used as features, comma-separated.
            feature_columns: The only feature columns, comma-separated; empty: inferred.
            shard_root: gs:// prefix for the prepared shards (only their manifest passes
                through the artifact store); empty: next to the dataset artifact on a gs://
                or local pipeline root, in the run's workspace on GKE otherwise.
            prepare_groups: With fan-out preparation (gkeflow.yaml preparation.fanout):
                the most parallel groups of input files (or bq:// row ranges); else unused.
            max_rejected_fraction: Fail preparation when more than this fraction of rows is
                rejected (unparseable or invalid).
            deploy: Serve the registered model (behind a servability check) on the
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
        # One-pod training keys its checkpoints on what it trains on and with (a retry of the
        # step resumes; a finished one removes them), not on the run id, which would keep
        # training out of the cache. Multi-worker engines keep the run id: they name and
        # re-attach their jobs by it.
        checkpoint_key = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        if train_engine is None and profiles["train-model"].caching:
            checkpoint_key = (f"{fingerprint.outputs['data']}-{label_column}-{train_ratio}-"
                              f"{eval_ratio}-{test_ratio}-{epochs}-{batch_size}-"
                              f"{learning_rate}-{early_stopping_patience}-{loss}-"
                              f"{label_transform}-{backend}-{task}-{model_type}-"
                              f"{candidates}-"
                              f"{gbdt_rounds}-{gbdt_learning_rate}-{gbdt_max_depth}-"
                              f"{gbdt_min_child_weight}-{gbdt_subsample}-"
                              f"{gbdt_colsample_bytree}-{gbdt_reg_lambda}-"
                              f"{gbdt_early_stopping_rounds}-"
                              f"{fingerprint.outputs['code']}")
        arguments = dict(
            dataset=dataset,
            schema=schema,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            early_stopping_patience=early_stopping_patience,
            loss=loss,
            label_transform=label_transform,
            backend=backend,
            model_type=model_type,
            candidates=candidates,
            user_module=user_module,
            gbdt_rounds=gbdt_rounds,
            gbdt_learning_rate=gbdt_learning_rate,
            gbdt_max_depth=gbdt_max_depth,
            gbdt_min_child_weight=gbdt_min_child_weight,
            gbdt_subsample=gbdt_subsample,
            gbdt_colsample_bytree=gbdt_colsample_bytree,
            gbdt_reg_lambda=gbdt_reg_lambda,
            gbdt_early_stopping_rounds=gbdt_early_stopping_rounds,
            require_gpu=platform(target).cloud and profiles["train-model"].uses_gpu,
            checkpoint_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
            pipeline_run_id=checkpoint_key,
            task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
            checkpoint_uri=checkpoint_uri,
        )
        if parallel:  # side by side, then train-model chooses
            train = candidates_stage.candidates_and_choice(
                tuple(parallel), {**arguments, "workspace_path": storage.path}, profiles,
                target, storage.checkpoint_volume, configure,
                {step: mount_env(gcsfuse, "train-model", target) for step in profiles})
        else:
            train = train_step(**arguments)
        evaluate_and_register(
            configure, register_step, dataset=dataset, schema=schema,
            model=train.outputs["model"], gate=gate,
            data_uri=data_uri, workspace_path=storage.path,
            training_inputs=training_inputs(scope, fingerprint),
            deploy=deploy_stage(target, profiles[DEPLOY_STEP], scope),
        )

    return training_pipeline


#: The pipeline as ``kfp.local`` runs it.
training_pipeline = build_training_pipeline("local")
