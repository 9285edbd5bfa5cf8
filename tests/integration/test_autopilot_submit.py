"""`gkeflow submit --target gke` with ``targets.gke.autopilot: true``: the pipeline uploaded to
Kubeflow Pipelines is the one compiled for GKE Autopilot (its selectors and requests), through
the same API and checks as on GKE Standard."""

from __future__ import annotations

from tests.integration.conftest import TOKEN, config_dict, gkeflow

TOKEN_ENV = {"GKEFLOW_TEST_KFP_TOKEN": TOKEN}


def _uploaded(kfp_server) -> str:
    uploads = kfp_server.calls("POST", r"/pipelines/upload")
    assert len(uploads) == 1
    return uploads[0].body.decode()


def test_submit_uploads_the_autopilot_pipeline_and_starts_one_run(kfp_server, tmp_path,
                                                                  write_config):
    data = config_dict(kfp_server.url, None)
    data["targets"]["gke"]["autopilot"] = True
    path = write_config(data)
    result = gkeflow("submit", "training", "--target", "gke", "--config", str(path),
                     cwd=tmp_path, env=TOKEN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    body = _uploaded(kfp_server)
    assert "cloud.google.com/compute-class: Accelerator" in body
    assert "resourceType: nvidia.com/gpu" in body
    assert "key: nvidia.com/gpu" not in body  # no node-pool toleration: Autopilot adds it
    assert len(kfp_server.calls("POST", r"/runs$")) == 1


def test_the_same_file_without_autopilot_uploads_the_standard_pipeline(kfp_server, tmp_path,
                                                                       write_config):
    path = write_config(config_dict(kfp_server.url, None))
    result = gkeflow("submit", "training", "--target", "gke", "--config", str(path),
                     cwd=tmp_path, env=TOKEN_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    body = _uploaded(kfp_server)
    assert "compute-class" not in body and "key: nvidia.com/gpu" in body
