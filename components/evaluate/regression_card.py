"""What a regressor's evaluation shows: the model card (Markdown) and the plots (HTML with
inline SVG, which the Kubeflow UI renders as it is): predicted against actual values, and
the residuals' histogram."""

from __future__ import annotations

from html import escape


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def render_regression_card(result) -> str:
    """Markdown for a :class:`~gkeflow.components.evaluate.regression.RegressionEvaluation`."""
    verdict = "**Blessed**" if result.passed else "**Not blessed**"
    lines = [f"# Model card: {result.model_name or 'model'}", "",
             f"Task: regression of `{result.data['label']}` on {result.data['test_rows']} test "
             "rows.", "", "## Metrics on the test split", "",
             "| metric | model | mean predictor |"
             + (" champion |" if result.champion_metrics else ""),
             "|---|---|---|" + ("---|" if result.champion_metrics else "")]
    for name in ("rmse", "mae", "r2", "mape"):
        row = (f"| {name} | {_fmt(result.metrics.get(name))} | "
               f"{_fmt(result.baseline.get(name))} |")
        if result.champion_metrics:
            row += f" {_fmt(result.champion_metrics.get(name))} |"
        lines.append(row)
    if result.metrics.get("mape") is None:
        lines += ["", "MAPE is not defined: some test labels are 0."]
    quantiles = ", ".join(f"{k} {_fmt(v)}" for k, v in result.residual_quantiles.items())
    sampled = result.data.get("residuals_sampled") or 0
    where = (f" (a uniform sample of {sampled:,} of the {result.data.get('test_rows', 0):,} "
             "test rows; the metrics above use every row)" if sampled else "")
    lines += ["", f"Residuals (predicted - actual){where}: {quantiles}.", "",
              f"The mean predictor always predicts {_fmt(result.baseline.get('prediction'))}, "
              "the train split's mean label.", ""]
    if result.slices:
        lines += ["## Slices", "", "| column | value | rows | rmse | mae |",
                  "|---|---|---|---|---|"]
        lines += [f"| {s.column} | {escape(s.value)} | {s.examples} | {_fmt(s.rmse)} | "
                  f"{_fmt(s.mae)} |" for s in result.slices]
        lines.append("")
    lines += ["## Decision", "", f"{verdict}.", ""]
    lines += [f"- {reason}" for reason in result.decision.reasons]
    lines += ["", "Predicted against actual values and the residuals' histogram: this step's "
                  "`plots` output (HTML).", ""]
    return "\n".join(lines)


def _scatter(pairs: list[tuple[float, float]], size: int = 360) -> str:
    if not pairs:
        return "<p>No test rows.</p>"
    values = [v for pair in pairs for v in pair]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    pad = 30

    def at(v: float) -> float:
        return pad + (v - low) / span * (size - 2 * pad)

    dots = "".join(f'<circle cx="{at(a):.1f}" cy="{size - at(p):.1f}" r="2" '
                   'fill="#1a73e8" fill-opacity="0.5"/>' for a, p in pairs)
    diagonal = (f'<line x1="{pad}" y1="{size - pad}" x2="{size - pad}" y2="{pad}" '
                'stroke="#888" stroke-dasharray="4"/>')
    labels = (f'<text x="{size / 2}" y="{size - 5}" text-anchor="middle" font-size="11">actual '
              f'({_fmt(low)} to {_fmt(high)})</text><text x="10" y="{size / 2}" '
              f'font-size="11" transform="rotate(-90 10 {size / 2})" text-anchor="middle">'
              'predicted</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" '
            f'role="img" aria-label="predicted against actual">{diagonal}{dots}{labels}</svg>')


def _histogram(counts: list[int], edges: list[float], width: int = 420,
               height: int = 240) -> str:
    if not counts:
        return "<p>No residuals.</p>"
    top = max(counts) or 1
    bar = (width - 40) / len(counts)
    bars = "".join(f'<rect x="{20 + i * bar:.1f}" y="{height - 30 - c / top * (height - 50):.1f}" '
                   f'width="{bar - 1:.1f}" height="{c / top * (height - 50):.1f}" '
                   f'fill="#34a853"><title>{_fmt(edges[i])} to {_fmt(edges[i + 1])}: {c}'
                   '</title></rect>' for i, c in enumerate(counts))
    axis = (f'<text x="20" y="{height - 10}" font-size="11">{_fmt(edges[0])}</text>'
            f'<text x="{width - 20}" y="{height - 10}" font-size="11" text-anchor="end">'
            f'{_fmt(edges[-1])}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'role="img" aria-label="residual histogram">{bars}{axis}</svg>')


def regression_plots_html(result) -> str:
    """One HTML page: predicted against actual (the first test rows, up to 1,000) and the
    histogram of every residual."""
    counts, edges = result.histogram
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Regression plots"
            "</title></head><body style=\"font-family:sans-serif\">"
            f"<h3>Predicted against actual ({len(result.pairs)} test rows)</h3>"
            f"{_scatter(result.pairs)}<h3>Residuals (predicted - actual), "
            f"{result.data['test_rows']} test rows</h3>{_histogram(list(counts), list(edges))}"
            "</body></html>")


__all__ = ["regression_plots_html", "render_regression_card"]
