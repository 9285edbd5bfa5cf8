"""The data report shown in the Kubeflow UI (Markdown): counts, problems, column statistics."""

from __future__ import annotations


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_report(source: str, result, rejected_samples: list[tuple[str, str]]) -> str:
    """Markdown for a :class:`~gkeflow.components.prepare.logic.PrepareResult`."""
    lines = [f"# Data report: `{source}`", ""]
    lines += ["| rows read | train | eval | test | rejected |", "|---|---|---|---|---|"]
    splits = result.split_rows
    lines.append(
        f"| {result.rows_read} | {splits['train']} | {splits['eval']} | {splits['test']} "
        f"| {result.rejected_rows} ({result.rejected_rows / max(result.rows_read, 1):.2%}) |"
    )
    lines.append("")
    lines += task_lines(result)
    lines.append("## Problems")
    lines.append("")
    if result.problems:
        lines += [f"- {_cell(p)}" for p in result.problems]
    else:
        lines.append("None found.")
    lines.append("")
    if result.rejected_reasons:
        lines += ["## Rejected rows", "", "| reason | rows |", "|---|---|"]
        for reason, n in sorted(result.rejected_reasons.items(), key=lambda kv: -kv[1]):
            lines.append(f"| {_cell(reason)} | {n} |")
        lines += ["", "Samples (every rejected row, with its file, line number, reason and "
                      "original text, is in `rejected.csv` and `rejected.jsonl`):", ""]
        for reason, text in rejected_samples:
            shown = _cell(text[:160]).replace("`", "'")
            lines.append(f"- {_cell(reason)}: `{shown}`")
        lines.append("")
    lines += ["## Columns", "",
              "| column | type | role | missing | min | max | mean | std | top values |",
              "|---|---|---|---|---|---|---|---|---|"]
    train = result.stats["splits"]["train"]["columns"]
    all_splits = result.stats["splits"]
    for column in result.schema.columns:
        total = sum(all_splits[s]["columns"][column.name]["count"] for s in all_splits)
        missing = sum(all_splits[s]["columns"][column.name]["missing"] for s in all_splits)
        stats = train[column.name]
        top = ", ".join(f"{_cell(v)} ({n})" for v, n in stats.get("top", [])[:5])
        lines.append(
            f"| {_cell(column.name)} | {column.type} | {column.role} | "
            f"{missing} ({missing / max(total, 1):.1%}) | {_cell(stats.get('min'))} | "
            f"{_cell(stats.get('max'))} | {_cell(stats.get('mean'))} | "
            f"{_cell(stats.get('std'))} | {top} |"
        )
    lines += ["", "Statistics are over the train split; `stats.json` has every split.", ""]
    return "\n".join(lines)


def task_lines(result) -> list[str]:
    """The task and why; for regression, the label's distribution."""
    schema = result.schema
    task = result.stats.get("task", {})
    why = f" ({_cell(task.get('reason'))})" if task.get("reason") else ""
    lines = [f"**Task:** {schema.task} of `{_cell(schema.label)}`{why}.", ""]
    if not schema.regression:
        return lines
    splits = result.stats["splits"]
    lines += ["## Label", "", "| split | rows | min | max | mean | std |",
              "|---|---|---|---|---|---|"]
    for split in ("train", "eval", "test"):
        stats = splits[split]["columns"][schema.label]
        lines.append(f"| {split} | {stats['count']} | {_cell(stats.get('min'))} | "
                     f"{_cell(stats.get('max'))} | {_cell(stats.get('mean'))} | "
                     f"{_cell(stats.get('std'))} |")
    sample = task.get("label_sample")
    if sample:
        quantiles = ", ".join(f"{name} {_cell(value)}"
                              for name, value in sample["quantiles"].items())
        lines += ["", f"Quantiles over the first {sample['rows']} rows: {quantiles}; "
                      f"skew {_cell(sample['skew'])}."]
    lines.append("")
    return lines
