"""The data a pipeline run trained on, as an MLflow dataset input: what MLflow's UI lists
in a run's Dataset column and its "Datasets used" panel.

One dataset per prepared source: its name (the file, table or query's last part), digest
(the data fingerprint, cut to MLflow's 36 characters: the same data gives the same
digest), source type and source (the URI as given; a query's text is not copied), the
label and split counts as its profile, and the ``mlflow.data.context`` tag ``training``.
It goes on prepare-data's run and on the pipeline run itself.
"""

from __future__ import annotations

import json
from typing import Any

#: MLflow's longest dataset digest.
MAX_DIGEST = 36
CONTEXT_TAG = "mlflow.data.context"


def source_type(data_uri: str) -> str:
    """``gcs``, ``bigquery``, ``http`` or ``local``, as the URI says."""
    if data_uri.startswith("gs://"):
        return "gcs"
    if data_uri.startswith(("bq://", "bigquery://")) or data_uri.lower().startswith("select"):
        return "bigquery"
    if data_uri.startswith(("http://", "https://")):
        return "http"
    return "local"


def dataset_name(data_uri: str) -> str:
    """The last part of the URI (a file or a table), or ``query`` for a query's text."""
    if data_uri.lower().lstrip().startswith("select"):
        return "query"
    name = data_uri.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    return (name or data_uri or "data")[:500]


def dataset_input(data_uri: str, fingerprint: str, label: str, split_rows: dict[str, int],
                  features: list[str]) -> Any:
    """The ``mlflow.entities.DatasetInput`` of one prepared source."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    kind = source_type(data_uri)
    source = {"uri": "(a query)" if kind == "bigquery" and " " in data_uri else data_uri}
    digest = (fingerprint.split(":", 1)[-1] or "unknown")[:MAX_DIGEST]
    profile = {"label": label, "rows": dict(split_rows), "features": len(features)}
    schema = {"mlflow_colspec": [{"name": name} for name in features[:1000]]}
    return DatasetInput(Dataset(dataset_name(data_uri), digest, kind, json.dumps(source),
                                json.dumps(schema), json.dumps(profile)),
                        tags=[InputTag(CONTEXT_TAG, "training")])


def log_dataset(tracker, dataset, run_ids: list[str]) -> None:
    """Log ``dataset`` as an input of each run in ``run_ids`` (best effort, as all tracking)."""
    for run_id in dict.fromkeys(r for r in run_ids if r):
        tracker.call("logging the dataset", tracker.client.log_inputs, run_id, [dataset])


def copy_datasets(tracker, source_run: Any, run_ids: list[str]) -> int:
    """The dataset inputs of ``source_run`` logged on each run of ``run_ids``; how many."""
    found = list(getattr(getattr(source_run, "inputs", None), "dataset_inputs", None) or [])
    if found:
        for run_id in dict.fromkeys(r for r in run_ids if r):
            tracker.call("copying the dataset", tracker.client.log_inputs, run_id, found)
    return len(found)
