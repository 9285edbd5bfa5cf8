"""`gkeflow plan` with `gcsfuse:` buckets: each step's mounts (bucket, path, read-only) on
GKE (with its claim) and on Vertex AI (the /gcs/ path, no volume)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main

GKEFLOW_YAML = """\
gcsfuse:
  buckets:
    - bucket: raw-data
      read_only: true
    - bucket: work-area
      mount_path: /work
      use: [shards, checkpoints]
"""


def plan(tmp_path, monkeypatch, *args: str, config: str = GKEFLOW_YAML):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gkeflow.yaml").write_text(config)
    return CliRunner(env={"COLUMNS": "400"}).invoke(main, ["plan", *args])


def _gcsfuse_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("gcsfuse:")]


def test_gke_plan_names_each_steps_buckets_paths_modes_and_claims(tmp_path, monkeypatch):
    result = plan(tmp_path, monkeypatch, "training", "--target", "gke")
    assert result.exit_code == 0, result.output
    lines = _gcsfuse_lines(result.output)
    assert lines[:4] == [
        "gcsfuse: fingerprint-data: gs://raw-data at /gcs/raw-data (read-only, claim "
        "gcsfuse-raw-data)",
        "gcsfuse: prepare-data: gs://raw-data at /gcs/raw-data (read-only, claim "
        "gcsfuse-raw-data), gs://work-area at /work (read-write, claim gcsfuse-work-area)",
        "gcsfuse: train-model: gs://work-area at /work (read-write, claim gcsfuse-work-area)",
        "gcsfuse: evaluate-model: gs://work-area at /work (read-write, claim "
        "gcsfuse-work-area)",
    ]
    assert "gcsfuse.csi.storage.gke.io" in lines[4] and len(lines) == 5


def test_vertex_plan_shows_the_gcs_paths_and_the_custom_job(tmp_path, monkeypatch):
    result = plan(tmp_path, monkeypatch, "training", "--target", "vertex",
                  "--compute", "train-model.replicas=2")
    assert result.exit_code == 0, result.output
    lines = _gcsfuse_lines(result.output)
    assert "gcsfuse: train-model (in its CustomJob): gs://work-area at /gcs/work-area " \
           "(read-write)" in lines
    assert "gcsfuse: fingerprint-data: gs://raw-data at /gcs/raw-data (read-only)" in lines
    assert not [line for line in lines if "claim" in line]
    assert lines[-1] == "gcsfuse: Vertex AI mounts Cloud Storage at /gcs/ itself: no volume"


def test_plan_json_lists_the_mounts_of_the_prediction_pipeline(tmp_path, monkeypatch):
    result = plan(tmp_path, monkeypatch, "prediction", "--target", "gke", "--output", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["gcsfuse"] == {"predict-batch": [
        {"bucket": "raw-data", "path": "/gcs/raw-data", "read_only": True,
         "claim": "gcsfuse-raw-data"}]}


def test_no_gcsfuse_prints_no_mount_line(tmp_path, monkeypatch):
    result = plan(tmp_path, monkeypatch, "training", "--target", "gke", config="{}\n")
    assert result.exit_code == 0, result.output
    assert _gcsfuse_lines(result.output) == []


def test_jobset_training_with_a_shard_bucket_is_refused_in_one_line(tmp_path, monkeypatch):
    result = plan(tmp_path, monkeypatch, "training", "--target", "gke",
                  "--compute", "train-model.replicas=2")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "JobSet whose pods mount no bucket" in result.output
