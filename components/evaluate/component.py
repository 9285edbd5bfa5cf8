"""KFP shell of the evaluation step."""

from kfp import dsl
from kfp.dsl import (
    HTML,
    Artifact,
    ClassificationMetrics,
    Dataset,
    Input,
    Markdown,
    Metrics,
    Model,
    Output,
)

from gkeflow.components.images import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def evaluate_model(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    model: Input[Model],
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    model_card: Output[Markdown],
    evaluation: Output[Artifact],
    plots: Output[HTML],
    min_accuracy: float = 0.8,
    model_name: str = "",
    registry_uri: str = "",
    comparison_metric: str = "accuracy",
    regression_tolerance: float = 0.0,
    baseline_margin: float = 0.05,
    thresholds: str = "",
    slice_columns: str = "",
    positive_class: str = "",
    workspace_path: str = "",
) -> bool:
    """Scores the model and the registry's champion on the test split; blesses or rejects it.

    A regressor (task regression in the schema) is scored on RMSE, MAE, R², MAPE and its
    residuals, against the mean predictor, per slice and against the champion.

    Args:
        dataset: Splits written by prepare_data; the test split is scored.
        schema: Column types and label vocabulary written by prepare_data.
        model: SavedModel written by train_model (the challenger).
        metrics: Accuracy, macro and per-class precision/recall/F1, log loss, ROC AUC,
            PR AUC, expected calibration error (ece) and per-slice accuracy; for a
            regressor rmse, mae, r2, mape, the mean predictor's and per-slice rmse.
        classification_metrics: Confusion matrix over the label vocabulary and the ROC
            curve of the positive class (at most 200 points).
        model_card: Data summary, metrics against the champion, slices and the decision
            with its reasons, rendered in the Kubeflow UI.
        evaluation: The same evidence as JSON (evaluation.json).
        plots: A regressor's predicted-against-actual plot and residual histogram.
        min_accuracy: Test accuracy a classifier must reach to be blessed (a regressor
            must beat the mean predictor's RMSE by 5% instead).
        model_name: Registered model whose champion the model is compared with; empty
            skips the comparison.
        registry_uri: Registry holding the champion; empty skips the comparison.
        comparison_metric: Overall metric on which the model must not regress against the
            champion (accuracy, precision_macro, recall_macro, f1_macro, log_loss, roc_auc,
            pr_auc or ece; for a regressor rmse, mae, r2 or mape, else rmse).
        regression_tolerance: How far the model may fall behind the champion on
            comparison_metric and still be blessed (a regressor: a fraction of the
            champion's value).
        baseline_margin: A regressor's test RMSE must be this fraction below the mean
            predictor's (0.05: 5% below); 0 = not worse than it.
        thresholds: Further absolute requirements, comma-separated, e.g.
            "f1_macro>=0.8,log_loss<=0.5" or "rmse<=250,r2>=0.8"; empty for none.
        slice_columns: Categorical columns to slice metrics by, comma-separated; empty
            slices by every categorical feature with at most 20 values.
        positive_class: Class whose ROC curve is logged (and whose AUCs are reported for
            binary labels); empty means the last label of the vocabulary.
        workspace_path: The run's workspace (dsl.WORKSPACE_PATH_PLACEHOLDER on GKE with a
            root other than gs://), where the test shards are read from; not read otherwise.

    Returns:
        Whether the model is blessed and may be registered.
    """
    from pathlib import Path

    from gkeflow.components._atomic import write_text_atomic
    from gkeflow.components.evaluate.logic import evaluate
    from gkeflow.components.evaluate.metrics import roc_points
    from gkeflow.components.evaluate.model_card import (
        gpu_utilisation_section,
        model_selection_section,
        render_model_card,
    )
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.sweep.logic import sweep_card_section

    data_schema = Schema.load(Path(schema.path))
    if data_schema.regression:
        from gkeflow.components.evaluate.regression import evaluate_regression
        from gkeflow.components.evaluate.regression_card import (
            regression_plots_html,
            render_regression_card,
        )

        result = evaluate_regression(
            Path(dataset.path), data_schema, Path(model.path), model_name=model_name,
            registry_uri=registry_uri, slice_columns=slice_columns,
            comparison_metric=comparison_metric, regression_tolerance=regression_tolerance,
            thresholds=thresholds, baseline_margin=baseline_margin)
        card = render_regression_card(result)
        plots_html = regression_plots_html(result)
    else:
        result = evaluate(
            dataset_dir=Path(dataset.path),
            schema=data_schema,
            model_dir=Path(model.path),
            min_accuracy=min_accuracy,
            model_name=model_name,
            registry_uri=registry_uri,
            slice_columns=slice_columns,
            positive_class=positive_class,
            comparison_metric=comparison_metric,
            regression_tolerance=regression_tolerance,
            thresholds=thresholds,
        )
        classification_metrics.log_confusion_matrix(result.metrics.labels,
                                                    result.metrics.confusion_matrix)
        classification_metrics.log_roc_curve(**roc_points(result.roc))
        classification_metrics.metadata["rocPositiveClass"] = result.roc_class
        card = render_model_card(result)
        from gkeflow.components.evaluate.classification_plots import classification_plots_html

        plots_html = classification_plots_html(result)
    write_text_atomic(Path(plots.path), plots_html)
    for name, value in result.scalar_metrics().items():
        metrics.log_metric(name, round(value, 6))
    metrics.metadata["passed"] = float(result.passed)
    from gkeflow.components.tracking.steps import track_evaluation

    card += (model_selection_section(Path(model.path)) + gpu_utilisation_section(Path(model.path))
             + sweep_card_section(Path(model.path)))
    write_text_atomic(Path(model_card.path), card)
    write_text_atomic(Path(evaluation.path), result.to_json())
    evaluation.metadata.update({
        "blessed": result.passed,
        "reasons": result.decision.reasons,
        "champion_version": result.champion.version if result.champion else 0,
    })
    for reason in result.decision.reasons:
        print(reason)
    print(result.decision.summary)
    track_evaluation(result, card, plots_html=plots_html if data_schema.regression else "")
    return result.passed
