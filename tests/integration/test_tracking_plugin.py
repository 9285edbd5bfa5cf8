"""`submit` and `schedule apply` to GKE hand tracking.mlflow's experiment to Kubeflow
Pipelines 2.17's MLflow plugin (``plugins_input.mlflow.experiment_name``, checked by the fake
KFP against the vendored swagger) and refuse it, in one line, on an older backend."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.targets.backend_version import BackendTooOld
from gkeflow.pipelines.targets.kfp import KfpBackend
from gkeflow.pipelines.targets.schedule import apply
from gkeflow.pipelines.targets.submit import submit
from tests.integration.conftest import FAST, TOKEN, config_dict, gkeflow

TRACKING = {"prod": {"mlflow": {"experiment": "penguins prod",
                                "tracking_uri": "http://mlflow.mlflow.svc.cluster.local:5000"}}}
#: The plugin's server only: without a tracking URI the steps cannot track themselves.
PLUGIN_ONLY = {"prod": {"mlflow": {"experiment": "penguins prod"}}}
WEEKLY = {"name": "weekly", "target": "gke", "cron": "0 6 * * 1", "environment": "prod"}


def _submit(config, tmp_path, environment="prod"):
    return submit(config, "training", "gke", environment=environment, overrides={},
                  workdir=tmp_path / "w", backend=KfpBackend(config.targets.gke, policy=FAST),
                  version="gabc")


def test_a_tracked_submit_sends_the_experiment_name(kfp_server, token_env, make_config,
                                                    tmp_path):
    kfp_server.tag_name = "2.17.0"
    submission, _ = _submit(make_config(kfp_server.url, None, tracking=TRACKING), tmp_path)
    (run,) = kfp_server.runs.values()
    assert run["plugins_input"] == {"mlflow": {"experiment_name": "penguins prod"}}
    assert any("MLflow experiment 'penguins prod'" in n and "plugin" in n
               for n in submission.notes)


def test_an_untracked_environment_sends_no_plugins_input(kfp_server, token_env, make_config,
                                                         tmp_path):
    kfp_server.tag_name = "2.16.0"
    _submit(make_config(kfp_server.url, None, tracking=TRACKING), tmp_path,
            environment="default")
    (run,) = kfp_server.runs.values()
    assert "plugins_input" not in run


def test_kfp_2_16_refuses_the_plugin_before_anything_is_created(kfp_server, token_env,
                                                                make_config, tmp_path):
    kfp_server.tag_name = "2.16.0"
    with pytest.raises(BackendTooOld) as refused:
        _submit(make_config(kfp_server.url, None, tracking=PLUGIN_ONLY), tmp_path)
    message = str(refused.value)
    assert "2.16.0" in message and "MLflow plugin" in message and "needs 2.17" in message
    assert "tracking.mlflow" in message
    assert kfp_server.calls("POST") == []


def test_kfp_2_16_with_a_tracking_uri_runs_in_direct_mode(kfp_server, token_env, make_config,
                                                          tmp_path):
    kfp_server.tag_name = "2.16.0"
    submission, _ = _submit(make_config(kfp_server.url, None, tracking=TRACKING), tmp_path)
    (run,) = kfp_server.runs.values()
    assert "plugins_input" not in run
    assert any("no MLflow plugin" in n and "direct mode" in n
               and "mlflow.mlflow.svc.cluster.local:5000" in n for n in submission.notes)


def test_a_tracked_schedule_on_kfp_2_16_runs_in_direct_mode(kfp_server, token_env,
                                                            make_config, tmp_path):
    kfp_server.tag_name = "2.16.0"
    config = make_config(kfp_server.url, None, schedules=[WEEKLY], tracking=TRACKING)
    apply(config, workdir=tmp_path, backends={"gke": KfpBackend(config.targets.gke,
                                                                policy=FAST)})
    (recurring,) = kfp_server.recurring_runs.values()
    assert "plugins_input" not in recurring


def test_a_tracked_schedule_carries_the_experiment_name(kfp_server, token_env, make_config,
                                                        tmp_path):
    kfp_server.tag_name = "2.17.1"
    config = make_config(kfp_server.url, None, schedules=[WEEKLY], tracking=TRACKING)
    apply(config, workdir=tmp_path, backends={"gke": KfpBackend(config.targets.gke,
                                                                policy=FAST)})
    (recurring,) = kfp_server.recurring_runs.values()
    assert recurring["plugins_input"] == {"mlflow": {"experiment_name": "penguins prod"}}
    assert recurring["trigger"]["cron_schedule"]["cron"].split()[0] == "0"


def test_a_tracked_schedule_is_refused_by_kfp_2_16(kfp_server, token_env, make_config,
                                                   tmp_path):
    kfp_server.tag_name = "2.16.0"
    config = make_config(kfp_server.url, None, schedules=[WEEKLY], tracking=PLUGIN_ONLY)
    with pytest.raises(BackendTooOld, match="MLflow plugin"):
        apply(config, workdir=tmp_path, backends={"gke": KfpBackend(config.targets.gke,
                                                                    policy=FAST)})
    assert kfp_server.recurring_runs == {}


def test_the_cli_refusal_is_one_line(kfp_server, write_config, tmp_path):
    kfp_server.tag_name = "2.16.0"
    path = write_config(config_dict(kfp_server.url, None, tracking=PLUGIN_ONLY))
    result = gkeflow("submit", "--target", "gke", "--env", "prod", "--config", str(path),
                     cwd=tmp_path, env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "2.16.0" in errors[0] and "tracking.mlflow" in errors[0]


def test_dry_run_shows_the_plugin_input_and_where_runs_are_tracked(kfp_server, write_config,
                                                                   tmp_path):
    path = write_config(config_dict(kfp_server.url, None, tracking=TRACKING))
    result = gkeflow("submit", "--target", "gke", "--env", "prod", "--dry-run", "--config",
                     str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tracking: MLflow experiment 'penguins prod'" in result.stdout
    assert "plugins_input" in result.stdout and "experiment_name" in result.stdout


@pytest.mark.parametrize("uri, kind", [("http://127.0.0.1:44623", "loopback"),
                                       ("http://localhost:5000", "loopback"),
                                       ("http://[::1]:5000", "loopback"),
                                       ("http://169.254.10.1:5000", "link-local")])
def test_compile_for_a_cloud_target_refuses_a_tracking_uri_its_pods_cannot_reach(
        tmp_path, uri, kind):
    """A loopback or link-local server compiled into GKE or Vertex AI steps would train and
    then fail to track and register: refused in one line before anything is written;
    allow_local_uri (a port-forwarded server) and local runs let it through."""
    import yaml

    from tests.integration.conftest import gkeflow

    tracking = {"default": {"mlflow": {"experiment": "penguins", "tracking_uri": uri}}}
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump({"tracking": tracking}))
    for target in ("gke", "vertex"):
        refused = gkeflow("compile", "--target", target, "--output", "out", cwd=tmp_path)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert f"tracking.mlflow.tracking_uri {uri} is a {kind} address" in refused.stderr
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.yaml"))
    tracking["default"]["mlflow"]["allow_local_uri"] = True
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump({"tracking": tracking}))
    allowed = gkeflow("compile", "--target", "gke", "--output", "out", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr


def test_submit_asks_the_tracking_server_before_the_run(kfp_server, token_env, make_config,
                                                        tmp_path, mlflow_server):
    """A cluster-internal server is said to be unchecked; a server that answers adds
    nothing; one that does not answer is a warning, and the run is still created."""
    kfp_server.tag_name = "2.17.0"
    submission, _ = _submit(make_config(kfp_server.url, None, tracking=TRACKING), tmp_path)
    assert ("tracking server http://mlflow.mlflow.svc.cluster.local:5000 is a "
            "cluster-internal name: not checked from here; the steps log there"
            in submission.notes)
    reachable = {"prod": {"mlflow": {"experiment": "e", "tracking_uri": mlflow_server.url,
                                     "allow_local_uri": True}}}  # port-forwarded
    submission, _ = _submit(make_config(kfp_server.url, None, tracking=reachable), tmp_path)
    assert not [n for n in submission.notes if "tracking server" in n]
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = {"prod": {"mlflow": {"experiment": "e", "tracking_uri": f"http://127.0.0.1:{port}",
                                "allow_local_uri": True}}}
    runs = len(kfp_server.runs)
    submission, _ = _submit(make_config(kfp_server.url, None, tracking=down), tmp_path)
    assert [n for n in submission.notes if n.startswith(
        f"warning: tracking server http://127.0.0.1:{port} did not answer from here")]
    assert len(kfp_server.runs) == runs + 1
