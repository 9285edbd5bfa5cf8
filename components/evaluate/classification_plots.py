"""The classification ``plots`` artifact: one self-contained HTML page with the test split's
confusion matrix (counts and each row's share) and the ROC curve of the positive class (an
inline SVG), readable straight from the artifact store or the Kubeflow UI's HTML viewer."""

from __future__ import annotations

from html import escape

import numpy as np


def confusion_table(labels: list[str], matrix) -> str:
    """Rows: the actual class; columns: the predicted one; each cell the count and its share
    of the row."""
    matrix = np.asarray(matrix, dtype=np.int64)
    head = "".join(f"<th>{escape(str(label))}</th>" for label in labels)
    rows = []
    for i, label in enumerate(labels):
        total = int(matrix[i].sum())
        cells = []
        for j in range(len(labels)):
            count = int(matrix[i, j])
            share = count / total if total else 0.0
            shade = f"rgba(31,119,180,{share:.3f})"
            cells.append(f"<td style=\"background:{shade};text-align:right\">{count}"
                         f"<br><small>{share:.0%}</small></td>")
        rows.append(f"<tr><th>{escape(str(label))}</th>{''.join(cells)}</tr>")
    return ("<table border=\"1\" cellpadding=\"6\" style=\"border-collapse:collapse\">"
            f"<tr><th>actual \\ predicted</th>{head}</tr>{''.join(rows)}</table>")


def roc_svg(fpr, tpr, size: int = 320) -> str:
    """The ROC curve as an SVG polyline over the unit square, with the chance diagonal."""
    points = " ".join(f"{float(x) * size:.1f},{(1 - float(y)) * size:.1f}"
                      for x, y in zip(fpr, tpr, strict=True))
    return (f"<svg width=\"{size}\" height=\"{size}\" viewBox=\"0 0 {size} {size}\" "
            "style=\"border:1px solid #999\">"
            f"<line x1=\"0\" y1=\"{size}\" x2=\"{size}\" y2=\"0\" stroke=\"#bbb\" "
            "stroke-dasharray=\"4\"/>"
            f"<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{points}\"/>"
            "</svg>")


def classification_plots_html(result) -> str:
    """The page for an :class:`~gkeflow.components.evaluate.logic.Evaluation`."""
    metrics = result.metrics
    auc = getattr(metrics, "roc_auc", None)
    shown = f" (AUC {auc:.4f})" if auc is not None else ""
    table = confusion_table(metrics.labels, metrics.confusion_matrix)
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Classification plots"
            "</title></head><body style=\"font-family:sans-serif\">"
            f"<h2>Confusion matrix: {metrics.examples} test rows, accuracy "
            f"{metrics.accuracy:.4f}</h2>{table}"
            f"<h2>ROC curve of {escape(str(result.roc_class))}{shown}</h2>"
            f"{roc_svg(result.roc.fpr, result.roc.tpr)}"
            "<p>False positive rate across, true positive rate up.</p></body></html>")
