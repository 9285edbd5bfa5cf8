"""PNG plots of the evaluation for MLflow: drawn with matplotlib when it is installed;
without it the evaluation is logged as JSON only."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def have_matplotlib() -> bool:
    return _pyplot() is not None


def confusion_matrix_png(labels: list[str], matrix: list[list[int]], path: Path) -> bool:
    """Draw the confusion matrix (rows: true class, columns: predicted) into ``path``."""
    plt = _pyplot()
    if plt is None:
        return False
    size = max(3.0, 0.6 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    try:
        ax.imshow(matrix, cmap="Blues")
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        if len(labels) <= 30:
            for i, row in enumerate(matrix):
                for j, count in enumerate(row):
                    ax.text(j, i, str(count), ha="center", va="center", fontsize=8)
        ax.set_title("Confusion matrix (test split)")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return True


def roc_png(fpr: list[float], tpr: list[float], positive_class: str, auc: float | None,
            path: Path) -> bool:
    """Draw the ROC curve of ``positive_class`` into ``path``."""
    plt = _pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    try:
        label = f"AUC {auc:.3f}" if auc is not None else "ROC"
        ax.plot(fpr, tpr, label=label)
        ax.plot([0, 1], [0, 1], linestyle=":", color="grey")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title(f"ROC curve: {positive_class}")
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return True
