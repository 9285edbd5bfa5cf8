"""Evaluation: score the exported model on the test split and decide whether it passes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from components.prepare.logic import Schema, load_split
from components.train.logic import ExportedModel, encode_labels, to_model_inputs


@dataclass
class ClassMetrics:
    precision: float
    recall: float
    f1: float
    support: int


@dataclass
class EvalResult:
    accuracy: float
    per_class: dict[str, ClassMetrics]
    confusion_matrix: list[list[int]]
    labels: list[str]
    examples: int
    passed: bool
    min_accuracy: float

    @property
    def decision(self) -> str:
        verdict = "passes" if self.passed else "fails"
        return (
            f"accuracy {self.accuracy:.4f} {verdict} the threshold min_accuracy="
            f"{self.min_accuracy:g}"
        )

    def scalar_metrics(self) -> dict[str, float]:
        """Short, stable names for the Kubeflow UI's metrics table."""
        metrics = {"accuracy": self.accuracy, "test_examples": float(self.examples)}
        for label, m in self.per_class.items():
            metrics[f"precision_{label}"] = m.precision
            metrics[f"recall_{label}"] = m.recall
            metrics[f"f1_{label}"] = m.f1
        return metrics


def confusion_matrix(true: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows are true classes, columns predicted classes."""
    matrix = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(matrix, (true, predicted), 1)
    return matrix


def classification_metrics(
    true: np.ndarray, predicted: np.ndarray, labels: list[str], min_accuracy: float
) -> EvalResult:
    """Accuracy, per-class precision/recall/F1 and the confusion matrix."""
    if len(true) != len(predicted):
        raise ValueError(f"{len(true)} true labels but {len(predicted)} predictions")
    if len(true) == 0:
        raise ValueError("cannot evaluate on an empty test split")
    matrix = confusion_matrix(true, predicted, len(labels))
    per_class = {}
    for i, label in enumerate(labels):
        tp = int(matrix[i, i])
        predicted_i = int(matrix[:, i].sum())
        actual_i = int(matrix[i, :].sum())
        precision = tp / predicted_i if predicted_i else 0.0
        recall = tp / actual_i if actual_i else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[label] = ClassMetrics(precision, recall, f1, actual_i)
    accuracy = float(np.trace(matrix) / matrix.sum())
    return EvalResult(
        accuracy=accuracy,
        per_class=per_class,
        confusion_matrix=matrix.tolist(),
        labels=list(labels),
        examples=int(len(true)),
        passed=accuracy >= min_accuracy,
        min_accuracy=min_accuracy,
    )


def evaluate(dataset_dir: Path, schema: Schema, model_dir: Path, min_accuracy: float) -> EvalResult:
    """Score ``model_dir`` on ``test.csv`` of ``dataset_dir``."""
    if not (0.0 <= min_accuracy <= 1.0):
        raise ValueError(f"min_accuracy must be between 0 and 1; got {min_accuracy}")
    model = ExportedModel(model_dir)
    if model.label_vocabulary != schema.label_vocabulary:
        raise ValueError(
            f"the model was trained for labels {model.label_vocabulary} but the data's schema "
            f"has {schema.label_vocabulary}"
        )
    test = load_split(dataset_dir, "test", schema)
    true = encode_labels(test, schema)
    probabilities = model.predict_proba(to_model_inputs(test, schema))
    return classification_metrics(
        true, probabilities.argmax(axis=1), schema.label_vocabulary, min_accuracy
    )


def render_report(result: EvalResult) -> str:
    """A Markdown summary the Kubeflow UI renders: decision, metrics, confusion matrix."""
    verdict = "PASSED" if result.passed else "FAILED"
    lines = [
        f"# Evaluation: {verdict}",
        "",
        result.decision + ".",
        "",
        f"Test examples: {result.examples}",
        "",
        "| class | precision | recall | F1 | support |",
        "|---|---|---|---|---|",
    ]
    for label, m in result.per_class.items():
        lines.append(f"| {label} | {m.precision:.3f} | {m.recall:.3f} | {m.f1:.3f} | {m.support} |")
    lines += ["", "## Confusion matrix (rows: true, columns: predicted)", ""]
    lines.append("| | " + " | ".join(result.labels) + " |")
    lines.append("|---" * (len(result.labels) + 1) + "|")
    for label, row in zip(result.labels, result.confusion_matrix):
        lines.append(f"| **{label}** | " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"
