"""A step served from the cache of a run that was never tracked: its nested run says
``untracked`` (not a run id that does not exist) and one line says how to get its figures;
against a real MLflow server."""

from __future__ import annotations

import pytest

from gkeflow.components.tracking.cached import (
    CACHED_FROM_TAG,
    CACHED_TAG,
    UNTRACKED,
    record_cached_steps,
)
from gkeflow.components.tracking.client import PARENT_TAG

pytest.importorskip("mlflow", reason="mlflow is not installed (pip install -e '.[dev]')")


def test_a_step_cached_from_an_untracked_run_says_so(mlflow_server):
    _experiment, parent = mlflow_server.create_run("cached-untracked")
    lines: list[str] = []
    recorded = record_cached_steps(mlflow_server.url, parent, ["prepare-data", "train-model"],
                                   log=lines.append)
    assert recorded == ["prepare-data", "train-model"]
    experiment_id = mlflow_server.run(parent)["info"]["experiment_id"]
    nested = {r["info"]["run_name"]: mlflow_server.run(r["info"]["run_id"])
              for r in mlflow_server.search_runs(experiment_id,
                                                 f"tags.`{PARENT_TAG}` = '{parent}'")}
    for task in recorded:
        assert nested[task]["tags"][CACHED_TAG] == "true"
        assert nested[task]["tags"][CACHED_FROM_TAG] == UNTRACKED
        assert nested[task]["params"] == {}  # nothing invented
    assert lines == ["tracking: prepare-data, train-model came from the cache of an untracked "
                     "run: MLflow has no figures or curves for them (run again with "
                     "--no-cache to retrain them, tracked)"]
