"""KFP shell of the evaluation step."""

from kfp import dsl
from kfp.dsl import (
    Artifact,
    ClassificationMetrics,
    Dataset,
    Input,
    Markdown,
    Metrics,
    Model,
    Output,
)

from components.images import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def evaluate_model(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    model: Input[Model],
    metrics: Output[Metrics],
    classification_metrics: Output[ClassificationMetrics],
    report: Output[Markdown],
    min_accuracy: float = 0.8,
) -> bool:
    """Scores the model on the held-out test split and decides whether it may be registered.

    Args:
        dataset: Splits written by prepare_data; the test split is scored.
        schema: Column types and label vocabulary written by prepare_data.
        model: SavedModel written by train_model.
        metrics: Test accuracy and per-class precision, recall and F1.
        classification_metrics: Confusion matrix over the label vocabulary.
        report: The decision and the metrics, rendered in the Kubeflow UI.
        min_accuracy: Test accuracy the model must reach to pass.

    Returns:
        Whether the model meets min_accuracy and may be registered.
    """
    from pathlib import Path

    from components.evaluate.logic import evaluate, render_report
    from components.prepare.logic import Schema

    result = evaluate(
        dataset_dir=Path(dataset.path),
        schema=Schema.load(Path(schema.path)),
        model_dir=Path(model.path),
        min_accuracy=min_accuracy,
    )
    for name, value in result.scalar_metrics().items():
        metrics.log_metric(name, round(value, 6))
    classification_metrics.log_confusion_matrix(result.labels, result.confusion_matrix)
    Path(report.path).parent.mkdir(parents=True, exist_ok=True)
    Path(report.path).write_text(render_report(result), encoding="utf-8")
    metrics.metadata["passed"] = float(result.passed)
    print(result.decision)
    return result.passed
