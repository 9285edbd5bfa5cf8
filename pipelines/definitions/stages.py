"""Stages the training and sweep pipelines share, wired one way for both.

``evaluate_and_register`` is the gate: evaluate the chosen model on the test split, then
register it only when evaluation blesses it. The training pipeline passes the model it
trained, the sweep pipeline the best trial's; both gate it with the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable

from kfp import dsl

from gkeflow.components import evaluate_model
from gkeflow.components.images import SERVING_IMAGE
from gkeflow.components.register.backends import CHAMPION_ALIAS
from gkeflow.components.register.vertex_component import register_model as vertex_register_model

Configure = Callable[[dsl.PipelineTask, str], dsl.PipelineTask]


def evaluate_and_register(
    configure: Configure,
    register_step,
    *,
    dataset,
    schema,
    model,
    gate: dict,
    data_uri,
    workspace_path: str = "",
    labels=None,
    training_inputs=None,
    deploy=None,
) -> dsl.PipelineTask:
    """Evaluate ``model``; register it under ``dsl.If(blessed)``. Returns the evaluate task.

    Args:
        configure: Applies a step's display name and compute.
        register_step: The target's register component (Vertex has its own variant).
        dataset, schema: prepare_data's outputs.
        model: The model to gate.
        gate: The pipeline's evaluation and registry parameters: model_name, min_accuracy,
            registry_uri, comparison_metric, regression_tolerance, thresholds,
            slice_columns, positive_class.
        data_uri: The training data, recorded with the registered version.
        workspace_path: The run's workspace (GKE without a gs:// root) or "".
        labels: Extra registry labels (the sweep's best trial), or None.
        training_inputs: What the model was trained on and with, or None; registration
            passes on an existing version trained on the same instead of adding a copy.
        deploy: Adds the deploy stage after registration, in the blessed branch
            (:func:`gkeflow.pipelines.definitions.deploy_stage.deploy_stage`), or None.
    """
    evaluate = configure(evaluate_model(
        dataset=dataset,
        schema=schema,
        model=model,
        min_accuracy=gate["min_accuracy"],
        model_name=gate["model_name"],
        registry_uri=gate["registry_uri"],
        comparison_metric=gate["comparison_metric"],
        regression_tolerance=gate["regression_tolerance"],
        baseline_margin=gate["baseline_margin"],
        thresholds=gate["thresholds"],
        slice_columns=gate["slice_columns"],
        positive_class=gate["positive_class"],
        workspace_path=workspace_path,
    ), "evaluate-model")
    # The champion may change between runs: evaluation is never served from cache.
    evaluate.set_caching_options(False)
    with dsl.If(evaluate.outputs["Output"] == True, name="model-blessed"):  # noqa: E712
        arguments = dict(
            model=model,
            metrics=evaluate.outputs["metrics"],
            model_name=gate["model_name"],
            pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            pipeline_task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
            registry_uri=gate["registry_uri"],
            data_uri=data_uri,
            # Blessed: at least as good as the champion it was compared with, so it takes
            # the alias the next run's gate reads (moved off the version holding it).
            aliases=CHAMPION_ALIAS,
        )
        if labels is not None:
            arguments["labels"] = labels
        if training_inputs is not None:
            arguments["training_inputs"] = training_inputs
        if register_step is vertex_register_model:
            # TensorFlow Serving of the training TensorFlow, for models no prebuilt Vertex AI
            # container serves; compiling pins it to the digest `gkeflow images build` wrote.
            arguments["serving_image"] = SERVING_IMAGE
        register = configure(register_step(**arguments), "register-model")
        if deploy is not None:
            deploy(register, evaluate, model)
    return evaluate


#: The pipeline parameters :func:`evaluate_and_register` reads from ``gate``.
GATE_PARAMETERS = ("model_name", "min_accuracy", "registry_uri", "comparison_metric",
                   "regression_tolerance", "baseline_margin", "thresholds", "slice_columns",
                   "positive_class")


#: The training pipeline's parameters that change the model it trains (besides the data's
#: content and the user module's source, which the fingerprint step hashes).
TRAINED_WITH = ("label_column", "task", "train_ratio", "eval_ratio", "test_ratio",
                "key_column", "exclude_columns", "feature_columns", "epochs", "batch_size",
                "learning_rate", "early_stopping_patience", "loss", "label_transform",
                "backend", "model_type", "candidates", "gbdt_rounds", "gbdt_learning_rate",
                "gbdt_max_depth", "gbdt_min_child_weight", "gbdt_subsample",
                "gbdt_colsample_bytree", "gbdt_reg_lambda", "gbdt_early_stopping_rounds")


def training_inputs(scope: dict, fingerprint: dsl.PipelineTask) -> str:
    """What the model is trained on and with, as one string resolved at run time: the data
    and code fingerprints and those of :data:`TRAINED_WITH` the pipeline has (registration
    skips a copy on it)."""
    text = f"data={fingerprint.outputs['data']};code={fingerprint.outputs['code']}"
    for name in TRAINED_WITH:
        if name in scope:
            text += f";{name}={scope[name]}"
    return text
