"""KFP shell of the scoring step: :func:`gkeflow.components.predict.logic.predict`."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from gkeflow.components.images import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def predict_batch(
    predictions: Output[Dataset],
    rejected: Output[Dataset],
    report: Output[Markdown],
    metrics: Output[Metrics],
    data_uri: str,
    model: str,
    registry_uri: str,
    output_uri: str = "",
    output_format: str = "parquet",
    model_version: int = 0,
    model_alias: str = "",
    key_column: str = "",
    batch_rows: int = 65536,
    max_rejected_fraction: float = 0.1,
    max_drift: float = 0.3,
    reject_unseen_categories: bool = False,
    bq_query: str = "",
    bq_filter: str = "",
    bq_write_mode: str = "truncate",
    pipeline_run_id: str = "",
    model_files: Input[Model] = None,
) -> NamedTuple("PredictOutputs", scored_version=int, rows_scored=int, rows_rejected=int):
    """Scores new rows with a registered model (the champion by default) in large batches.

    Args:
        predictions: Predictions (key, predicted_class, probability_<class>, model_name,
            model_version); metadata: rows read/scored/rejected, model, drift figures.
        rejected: rejected.csv: rows the training schema rejects, with the reason.
        report: Scoring report: counts, reject reasons, drift per column.
        metrics: Rows read, scored, rejected; throughput; drift figures.
        data_uri: Rows to score: local path or glob, gs:// URI or glob, or
            bq://project.dataset.table; CSV (optionally .gz) or Parquet.
        model: Registered model: NAME, NAME@VERSION or NAME@ALIAS.
        registry_uri: sqlite:///<path>, vertex://projects/<p>/locations/<l> or
            kubeflow://host:port.
        output_uri: Where predictions go as well: gs://bucket/file.parquet (or .csv), or
            bq://project.dataset.table; empty: only the predictions artifact.
        output_format: parquet or csv (the predictions artifact, and an output_uri
            without an extension).
        model_version: Registered version to use; 0 = by alias.
        model_alias: Registry alias to use; empty = champion (the newest version when no
            champion was promoted).
        key_column: Column copied to the predictions to identify each row; empty = the
            row number in reading order.
        batch_rows: Rows per call of the model.
        max_rejected_fraction: Fail when more than this fraction of rows is rejected.
        max_drift: Fail when any feature column's drift (share of rows with a new
            category or a number outside the training range; 1 for a missing column)
            exceeds this; 1 disables the check.
        reject_unseen_categories: Reject rows with categories the model never saw.
        bq_query: For bq:// inputs, a SQL query to run instead of reading the table.
        bq_filter: For bq:// inputs, a SQL row filter.
        bq_write_mode: For bq:// outputs: truncate (replace the table) or append.
        pipeline_run_id: Run id; a retried BigQuery load finds the first one.
        model_files: The registered model imported as an artifact (resolve_model, then
            dsl.importer), so the KFP launcher downloads it from any artifact store (the
            GKE pipeline: models registered at minio://); absent: read from the registry's
            URI (local paths and gs://).

    Returns:
        scored_version: The version that scored the rows.
        rows_scored: Rows with a prediction.
        rows_rejected: Rows set aside in rejected.csv.
    """
    import tempfile
    from collections import namedtuple
    from pathlib import Path

    from gkeflow.components.predict.logic import predict
    from gkeflow.components.predict.sinks import check_output_uri
    from gkeflow.components.predict.sinks import output_format as format_of

    extension = format_of("", output_format)  # refuses anything but parquet or csv
    if output_uri:  # refused before any row is scored, not after
        check_output_uri(output_uri)
        format_of(output_uri, extension)
    Path(predictions.path).mkdir(parents=True, exist_ok=True)
    local_file = str(Path(predictions.path) / f"predictions.{extension}")
    Path(rejected.path).mkdir(parents=True, exist_ok=True)
    common = dict(
        data_uri=data_uri, model=model, registry_uri=registry_uri,
        rejects_path=Path(rejected.path) / "rejected.csv", report_path=Path(report.path),
        model_version=model_version, model_alias=model_alias, key_column=key_column,
        default_format=extension, batch_rows=batch_rows,
        max_rejected_fraction=max_rejected_fraction, max_drift=max_drift,
        reject_unseen_categories=reject_unseen_categories, bq_query=bq_query,
        bq_filter=bq_filter, bq_write_mode=bq_write_mode, run_id=pipeline_run_id,
        model_files=(Path(model_files.path), model_files.uri) if model_files else None,
    )
    from gkeflow.components.predict.logic import DriftError

    with tempfile.TemporaryDirectory() as workdir:
        try:
            result = predict(output_uri=local_file, workdir=Path(workdir), **common)
        except DriftError:  # a failed step's artifacts are not uploaded: log the report
            print(Path(report.path).read_text(encoding="utf-8"))
            raise
        if output_uri:  # the same rows, published to the requested destination
            from gkeflow.components.predict.logic import publish_copy

            publish_copy(local_file, output_uri, run_id=pipeline_run_id,
                         bq_write_mode=bq_write_mode)
    predictions.metadata.update(result.metadata())
    if output_uri:
        predictions.metadata["published_to"] = output_uri
    for name in ("rows_read", "rows_scored", "rows_rejected"):
        metrics.log_metric(name, getattr(result, name))
    metrics.log_metric("rows_per_s", round(result.rows_per_s, 1))
    for name, value in result.drift.items():
        metrics.log_metric(name, value)
    rejected.metadata.update({"rows_rejected": result.rows_rejected,
                              "reasons": result.reject_reasons})
    print(f"scored {result.rows_scored} of {result.rows_read} rows with {result.model_name} "
          f"version {result.model_version} ({result.selected_by}); "
          f"{result.rows_rejected} rejected")
    from gkeflow.components.tracking.steps import track_prediction

    track_prediction(result, output_uri)
    outputs = namedtuple("PredictOutputs", ["scored_version", "rows_scored", "rows_rejected"])
    return outputs(result.model_version, result.rows_scored, result.rows_rejected)


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def report_predictions(
    predictions: Input[Dataset],
    scoring_report: Input[Markdown],
    summary: Output[Markdown],
    metrics: Output[Metrics],
):
    """Summarises a scoring run: predicted-class mix, confidence, then counts and drift.

    Args:
        predictions: The predictions written by predict_batch.
        scoring_report: The scoring step's report (counts, rejects, drift).
        summary: Markdown summary shown in the Kubeflow UI.
        metrics: Rows, mean top-class probability and each class's share.
    """
    from pathlib import Path

    from gkeflow.components.predict.summary import predictions_file, summarize

    text, figures = summarize(predictions_file(Path(predictions.path)),
                              Path(scoring_report.path).read_text(encoding="utf-8"))
    Path(summary.path).write_text(text, encoding="utf-8")
    for name, value in figures.items():
        metrics.log_metric(name, value)
    from gkeflow.components.tracking.more_steps import track_prediction_report

    track_prediction_report(figures, text)
