"""`submit` and `schedule apply` read the backend's version and refuse what it cannot run
(fake KFP reporting 2.13, the oldest supported 2.14, the Kubeflow Platform's 2.16, unknown)."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.targets.backend_version import BackendTooOld
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.submit import submit
from tests.integration.conftest import FAST, TOKEN, gkeflow

WEEKLY = {"name": "weekly", "target": "gke", "cron": "0 6 * * 1"}


def _submit(config, tmp_path):
    return submit(config, "training", "gke", environment="default", overrides={},
                  workdir=tmp_path / "w", backend=KfpBackend(config.targets.gke, policy=FAST),
                  version="gabc")


def test_a_workspace_pipeline_is_refused_by_kfp_2_13_before_anything_is_created(
        kfp_server, token_env, make_config, tmp_path):
    kfp_server.tag_name = "2.13.0"
    config = make_config(kfp_server.url, None)
    with pytest.raises(BackendTooOld) as refused:
        _submit(config, tmp_path)
    message = str(refused.value)
    assert "Kubeflow Pipelines 2.13.0" in message and "needs 2.14" in message
    assert "workspace.enabled: false" in message
    assert kfp_server.calls("POST") == []  # nothing uploaded, no run


@pytest.mark.parametrize("tag", ["2.14.0", "2.16.0"])  # the oldest promised; the Platform's
def test_supported_backends_accept_the_default_pipeline(kfp_server, token_env, make_config,
                                                        tmp_path, tag):
    kfp_server.tag_name = tag
    submission, _ = _submit(make_config(kfp_server.url, None), tmp_path)
    assert not any(n.startswith("warning") for n in submission.notes)
    assert len(kfp_server.runs) == 1


def test_an_unknown_backend_version_warns_and_submits(kfp_server, token_env, make_config,
                                                      tmp_path):
    kfp_server.tag_name = "unknown"
    submission, _ = _submit(make_config(kfp_server.url, None), tmp_path)
    assert any("'unknown'" in n and "cannot check" in n for n in submission.notes)
    assert len(kfp_server.runs) == 1


def test_without_a_workspace_kfp_2_13_runs_it(kfp_server, token_env, make_config, tmp_path):
    kfp_server.tag_name = "2.13.0"
    _submit(make_config(kfp_server.url, None, workspace={"enabled": False}), tmp_path)
    assert len(kfp_server.runs) == 1


def test_schedule_apply_refuses_too(kfp_server, token_env, make_config, tmp_path):
    kfp_server.tag_name = "2.13.0"
    config = make_config(kfp_server.url, None, schedules=[WEEKLY])
    with pytest.raises(BackendTooOld, match="workspace.enabled: false"):
        apply(config, workdir=tmp_path, backends={"gke": KfpBackend(config.targets.gke,
                                                                    policy=FAST)})
    assert kfp_server.recurring_runs == {}


def test_the_cli_refusal_is_one_line_without_traceback(kfp_server, token_env, make_config,
                                                       write_config, tmp_path):
    from tests.integration.conftest import config_dict

    kfp_server.tag_name = "2.13.0"
    path = write_config(config_dict(kfp_server.url, None))
    result = gkeflow("submit", "--target", "gke", "--config", str(path), cwd=tmp_path,
                     env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "2.13.0" in errors[0] and "workspace.enabled: false" in errors[0]
    assert TOKEN not in result.stdout + result.stderr
