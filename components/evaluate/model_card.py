"""The model card: the evaluation's evidence as Markdown the Kubeflow UI renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gkeflow.components.evaluate.logic import Evaluation
from gkeflow.components.evaluate.metrics import LOWER_IS_BETTER, OVERALL_METRICS


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _escape(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _auc_note(e: Evaluation) -> str:
    if e.metrics.curves_exact:
        return ""
    bound = e.metrics.auc_error_bound
    return (f" The test split has more distinct scores than the score histograms keep, so "
            f"the AUCs are within {bound['roc_auc']:.2g} (ROC) and {bound['pr_auc']:.2g} (PR) "
            f"of the exact values; every ROC point is an exact operating point.")


def render_model_card(evaluation: Evaluation) -> str:
    """Decision, data summary, metrics against the champion, per-class metrics, confusion
    matrix and slices, as one Markdown document."""
    e = evaluation
    verdict = "BLESSED" if e.decision.blessed else "NOT BLESSED"
    title = f"# Model card: {_escape(e.model_name)}" if e.model_name else "# Model card"
    lines = [title, "", f"## Decision: {verdict}", ""]
    lines += [f"- {'✅' if c.ok else '❌'} {_escape(c.detail)}" for c in e.decision.checks]
    policy = e.policy
    lines += [
        "",
        (f"Policy: min_accuracy {policy.min_accuracy:g}; thresholds "
         f"{', '.join(str(t) for t in policy.thresholds) or 'none'}; no regression on "
         f"{policy.comparison_metric} beyond {policy.regression_tolerance:g}."),
        "",
        "## Data",
        "",
        f"Label: `{_escape(e.data['label'])}`. Rows per split: "
        + ", ".join(f"{k} {v}" for k, v in e.data["rows"].items()) + ".",
        "",
        "Features: " + ", ".join(f"`{_escape(f['name'])}` ({f['type']})"
                                 for f in e.data["features"]) + ".",
        "",
        "| class | test examples |",
        "|---|---|",
    ]
    lines += [f"| {_escape(k)} | {v} |" for k, v in e.data["test_class_counts"].items()]

    champion = e.champion
    lines += ["", f"## Metrics on the test split ({e.metrics.examples} examples)", ""]
    if champion is not None and champion.metrics is not None:
        theirs = champion.metrics.overall()
        lines += [f"| metric | challenger | champion {_escape(champion.label)} | change |",
                  "|---|---|---|---|"]
        for name, mine in e.metrics.overall().items():
            other = theirs[name]
            change = "n/a" if mine is None or other is None else f"{mine - other:+.4f}"
            lines.append(f"| {name} | {_cell(mine)} | {_cell(other)} | {change} |")
    else:
        lines += ["| metric | challenger |", "|---|---|"]
        lines += [f"| {n} | {_cell(v)} |" for n, v in e.metrics.overall().items()]
        lines += ["", "Champion: " + (
            "none registered." if champion is None else
            f"{_escape(champion.label)} is not comparable ({_escape(champion.not_comparable)}).")]
    lower = ", ".join(m for m in OVERALL_METRICS if m in LOWER_IS_BETTER)
    lines += ["", f"Lower is better for {lower}; higher for the rest. ROC AUC and PR AUC are "
              + ("of the positive class `" + _escape(e.roc_class) + "`."
                 if len(e.metrics.labels) == 2 else "macro averages of one-vs-rest AUCs.")
              + _auc_note(e),
              "", "## Per class", "",
              "| class | precision | recall | F1 | ROC AUC | PR AUC | support |",
              "|---|---|---|---|---|---|---|"]
    for label, m in e.metrics.per_class.items():
        lines.append(f"| {_escape(label)} | {m.precision:.3f} | {m.recall:.3f} | {m.f1:.3f} | "
                     f"{_cell(m.roc_auc)} | {_cell(m.pr_auc)} | {m.support} |")
    lines += ["", "## Confusion matrix (rows: true, columns: predicted)", "",
              "| | " + " | ".join(_escape(x) for x in e.metrics.labels) + " |",
              "|---" * (len(e.metrics.labels) + 1) + "|"]
    for label, row in zip(e.metrics.labels, e.metrics.confusion_matrix, strict=True):
        lines.append(f"| **{_escape(label)}** | " + " | ".join(str(v) for v in row) + " |")

    lines += ["", "## Slices", ""]
    if not e.slices:
        lines.append("No categorical columns to slice by.")
    else:
        with_champion = any(s.champion_accuracy is not None for s in e.slices)
        header = "| column | value | examples | accuracy | vs overall | macro F1 | log loss |"
        rule = "|---|---|---|---|---|---|---|"
        if with_champion:
            header += " champion accuracy |"
            rule += "---|"
        lines += [header, rule]
        for s in e.slices:
            row = (f"| {_escape(s.column)} | {_escape(s.value)} | {s.examples} | "
                   f"{s.accuracy:.4f} | {s.accuracy - e.metrics.accuracy:+.4f} | "
                   f"{s.f1_macro:.4f} | {s.log_loss:.4f} |")
            if with_champion:
                row += f" {_cell(s.champion_accuracy)} |"
            lines.append(row)
    return "\n".join(lines) + "\n"


def model_selection_section(model_dir: Path) -> str:
    """The card's "Model selection" section: the candidates ``model_type: auto`` trained,
    each one's eval-split figures, which won and why; empty for a model of one family."""
    from gkeflow.components.train.exported import MODEL_METADATA_FILE

    path = Path(model_dir) / MODEL_METADATA_FILE
    selection = json.loads(path.read_text()).get("model_selection") if path.is_file() else None
    if not selection:
        return ""
    metric = selection["metric"]
    lines = ["", "## Model selection", "",
             f"Chosen: **{_escape(selection['chosen'])}**, {_escape(selection['reason'])}. "
             "Only the chosen model is scored on the test split.", "",
             f"| candidate | status | {metric} | seconds |", "|---|---|---|---|"]
    for name, entry in selection["candidates"].items():
        value = entry.get(metric)
        lines.append(f"| {_escape(name)} | {_escape(entry['status'])}"
                     + (f" ({_escape(entry['error'])})" if entry.get("error") else "")
                     + f" | {_cell(value)} | {entry.get('seconds', '')} |")
    for line in selection.get("left_out", []):
        lines.append(f"\nLeft out: {_escape(line)}.")
    return "\n".join(lines) + "\n"


def gpu_utilisation_section(model_dir: Path) -> str:
    """The card's "GPU utilisation during training" section, from the utilisation the
    training step recorded in the model's metadata; empty for models without it."""
    from gkeflow.components.train.exported import MODEL_METADATA_FILE

    path = Path(model_dir) / MODEL_METADATA_FILE
    if not path.is_file():
        return ""
    usage: dict[str, Any] | None = json.loads(path.read_text()).get("gpu_utilisation")
    if not usage:
        return ""
    from gkeflow.components.train.utilisation import DEVICE_WORDS

    name, units, figure = DEVICE_WORDS.get(usage.get("kind", "gpu"), DEVICE_WORDS["gpu"])
    lines = ["", f"## {name} {figure} during training", ""]
    run = usage.get("run")
    if usage.get("status") != "sampled" or not run:
        lines.append(f"Not recorded: {_escape(usage.get('reason') or 'no sample')}.")
        return "\n".join(lines) + "\n"
    lines.append(
        f"{usage['samples']} samples, every {usage['interval_s']:g} s, of {usage['devices']} "
        f"{units}: {figure} mean {run['utilisation_mean_pct']:.1f}%, p10 "
        f"{run['utilisation_p10_pct']}%, peak {run['utilisation_peak_pct']}%; memory used "
        f"mean {run['memory_used_mean_mib']:.0f} MiB, p10 {run['memory_used_p10_mib']:.0f} "
        f"MiB, peak {run['memory_used_peak_mib']:.0f} of {run['memory_total_mib']:.0f} MiB.")
    if usage.get("reason"):
        lines += ["", f"Note: {_escape(usage['reason'])}."]
    if usage.get("warning"):
        lines += ["", f"⚠️ {_escape(usage['warning'])}."]
    epochs = usage.get("epochs") or {}
    if epochs:
        lines += ["", "| epoch | mean % | p10 % | peak % | memory used peak (MiB) |",
                  "|---|---|---|---|---|"]
        for epoch, f in sorted(epochs.items(), key=lambda item: int(item[0])):
            lines.append(f"| {epoch} | {f['utilisation_mean_pct']:.1f} | "
                         f"{f['utilisation_p10_pct']} | {f['utilisation_peak_pct']} | "
                         f"{f['memory_used_peak_mib']:.0f} |")
    return "\n".join(lines) + "\n"
