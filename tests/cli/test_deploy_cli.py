"""`gkeflow deploy` without a model: help, one-line errors, nothing deployed."""

from __future__ import annotations

from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main


def run(*args, **kwargs):
    return CliRunner().invoke(main, list(args), **kwargs)


def test_help_names_every_action():
    result = run("deploy", "--help")
    assert result.exit_code == 0
    for word in ("promote", "rollback", "status", "local", "--traffic", "--dry-run"):
        assert word in result.output
    own = result.output[result.output.index("Options of gkeflow deploy NAME"):]
    for option in ("--target [local|vertex|gke]", "--traffic INTEGER RANGE", "--evaluation",
                   "--dry-run", "--endpoint NAME"):
        assert option in own
    assert "--target" in run("deploy", "promote", "--help").output


def test_status_of_nothing_and_errors_are_one_line(tmp_path):
    result = run("deploy", "status", "penguins", "--output", str(tmp_path))
    assert result.exit_code == 0 and result.output.strip() == "penguins: nothing deployed"
    result = run("deploy", "promote", "penguins", "--output", str(tmp_path))
    assert result.exit_code == 1 and "no local endpoint penguins" in result.output
    assert "Traceback" not in result.output
    request = tmp_path / "r.json"
    request.write_text("{}")
    result = run("deploy", "local", "penguins", "--output", str(tmp_path), "--request",
                 str(request))
    assert result.exit_code == 1 and "run `gkeflow run --deploy` first" in result.output


def test_vertex_needs_its_target_and_unknown_environments_are_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("deploy", "status", "penguins", "--target", "vertex")
    assert result.exit_code == 1 and "targets.vertex" in result.output
    result = run("deploy", "status", "penguins", "--env", "prod")
    assert result.exit_code == 1 and "no deploy.prod" in result.output


def test_a_model_that_is_not_registered_is_named(tmp_path):
    (tmp_path / "registry.db").touch()
    result = run("deploy", "ghost@1", "--output", str(tmp_path))
    assert result.exit_code == 1 and "ghost" in result.output
    assert "Traceback" not in result.output
    assert "no model named 'ghost'" in result.output and "holds no models yet" in result.output


def test_a_missing_model_is_told_from_a_missing_version(tmp_path):
    from gkeflow.components.register.local_registry import LocalRegistry

    registry = LocalRegistry(f"sqlite:///{tmp_path / 'registry.db'}")
    for name in ("penguins-classifier", "loans"):
        registry.register(name, f"/models/{name}", {}, run_id="r1")
    typo = run("deploy", "penguin-classifier@1", "--output", str(tmp_path))
    assert typo.exit_code == 1 and "has no version" not in typo.output
    assert "no model named 'penguin-classifier'" in typo.output
    assert "its models: loans, penguins-classifier" in typo.output
    assert "did you mean 'penguins-classifier'?" in typo.output
    version = run("deploy", "loans@7", "--output", str(tmp_path))
    assert version.exit_code == 1
    assert "model 'loans' has no version 7" in version.output
    assert "(versions: 1); name one (loans@1)" in version.output


def test_vertex_without_credentials_says_the_model_could_not_be_checked(tmp_path,
                                                                          monkeypatch):
    import yaml

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump({"targets": {"vertex": {
        "project": "my-project", "region": "us-central1",
        "pipeline_root": "gs://my-bucket/root",
        "service_account": "p@my-project.iam.gserviceaccount.com"}}}))
    result = run("deploy", "nosuchmodel@1", "--target", "vertex")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: cannot check whether model nosuchmodel@1 exists in the Vertex AI Model "
        "Registry (projects/my-project/locations/us-central1): no Google credentials found; "
        "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS "
        "to a service-account key file)")
    malformed = run("deploy", "No_Such@1", "--target", "vertex")  # checked before credentials
    assert malformed.exit_code == 1 and "credentials" not in malformed.output


def test_promote_rollback_status_on_vertex_through_the_cli(tmp_path, monkeypatch):
    import yaml

    from gkeflow.components.cloud.retry import RetryPolicy
    from gkeflow.components.deploy.vertex_endpoint import Machine, VertexEndpoints
    from tests.integration.fake_vertex_endpoints import FakeEndpointService

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GKEFLOW_RETRY_BUDGET_S", "5")
    with FakeEndpointService() as fake:
        (tmp_path / "gkeflow.yaml").write_text(yaml.safe_dump({"targets": {"vertex": {
            "project": fake.project, "region": fake.location,
            "pipeline_root": "gs://my-bucket/root",
            "service_account": "p@my-project.iam.gserviceaccount.com",
            "api_endpoint": fake.url}}}))
        fake.add_model("555", "1", "2")
        api = VertexEndpoints(fake.project, fake.location, RetryPolicy(budget_s=5),
                              api_endpoint=fake.url, echo=lambda line: None, poll_s=0)
        for version in ("1", "2"):
            api.deploy("penguins", f"{fake.parent}/models/555@{version}", Machine())
        status = run("deploy", "status", "penguins", "--target", "vertex")
        assert status.exit_code == 0 and "penguins-v1 90%, penguins-v2 10%" in status.output
        promoted = run("deploy", "promote", "penguins", "--target", "vertex")
        assert promoted.exit_code == 0, promoted.output
        assert fake.split_by_version() == {"1": 0, "2": 100}
        rolled = run("deploy", "rollback", "penguins", "--target", "vertex")
        assert rolled.exit_code == 0 and fake.split_by_version() == {"1": 90, "2": 10}
        assert len(fake.endpoints) == 1 and not fake.violations


def test_promote_rollback_status_on_gke_through_the_cli(tmp_path, monkeypatch):
    import yaml
    from kubernetes import client

    from gkeflow.components.deploy.kserve import (
        InferenceServices,
        KServeApi,
        ModelVersion,
        Placement,
    )
    from tests.integration.fake_kserve import FakeKServe

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GKEFLOW_RETRY_BUDGET_S", "5")
    with FakeKServe() as kube:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
            "users": [{"name": "fake", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        services = InferenceServices(
            KServeApi(client.ApiClient(client.Configuration(host=kube.url)),
                      echo=lambda line: None), "models", "serverless")
        for n in (1, 2):
            services.deploy("penguins", ModelVersion(f"v{n}", n, f"gs://b/penguins-v{n}",
                                                     "2.21.0"), Placement())
        where = ("--target", "gke", "--namespace", "models")
        status = run("deploy", "status", "penguins", *where)
        assert status.exit_code == 0 and "v1 90%, v2 10%" in status.output, status.output
        assert run("deploy", "promote", "penguins", *where).exit_code == 0
        assert kube.traffic(name="penguins") == {"gs://b/penguins-v2": 100}
        assert run("deploy", "rollback", "penguins", *where).exit_code == 0
        assert kube.traffic(name="penguins") == {"gs://b/penguins-v1": 90,
                                                 "gs://b/penguins-v2": 10}
        assert kube.count() == 1 and not kube.violations


def test_models_list_shows_the_share_each_inference_service_gives_a_version(
        tmp_path, monkeypatch):
    from kubernetes import client

    from gkeflow.components.deploy.kserve import (
        InferenceServices,
        KServeApi,
        ModelVersion,
        Placement,
    )
    from gkeflow.pipelines.cli.deploy_serving import serving_by_version
    from tests.integration.fake_kserve import FakeKServe

    with FakeKServe() as kube:
        api = client.ApiClient(client.Configuration(host=kube.url))
        for namespace, mode in (("models", "serverless"), ("serving", "standard")):
            services = InferenceServices(KServeApi(api, echo=lambda line: None), namespace,
                                         mode)
            for n in (1, 2):
                services.deploy("penguins", ModelVersion(
                    f"v{n}", n, f"gs://b/penguins-v{n}", "2.21.0"), Placement(),
                    labels={"gkeflow-model": "penguins-classifier"})
        services.promote("penguins", Placement(), keep=1)
        shares = serving_by_version("kubeflow", "kubeflow://mr:8080", "",
                                    ["models", "serving", "models"], kube=api)
        assert shares == {
            ("penguins-classifier", 1): "models/penguins 90%, serving/penguins 0%",
            ("penguins-classifier", 2): "models/penguins 10%, serving/penguins 100%"}
        assert not kube.violations
    # no cluster to ask: the registry's table is still shown, without shares, after a few
    # seconds of retries at most (never a launcher's 15 minutes)
    from gkeflow.pipelines.cli.deploy_serving import lookup_policy

    monkeypatch.delenv("GKEFLOW_RETRY_BUDGET_S", raising=False)
    assert (lookup_policy().budget_s, lookup_policy().call_timeout_s) == (15.0, 10.0)
    down = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    monkeypatch.setenv("GKEFLOW_RETRY_BUDGET_S", "1")
    assert lookup_policy().budget_s == 1.0
    assert serving_by_version("kubeflow", "kubeflow://mr:8080", "", ["models"],
                              kube=down) == {}


def test_kserve_refusals_are_one_line_on_gke_through_the_cli(tmp_path, monkeypatch):
    import yaml
    from kubernetes import client

    from gkeflow.components.deploy.kserve import (
        InferenceServices,
        KServeApi,
        ModelVersion,
        Placement,
    )
    from tests.integration.fake_kserve import FakeKServe

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GKEFLOW_RETRY_BUDGET_S", "5")
    with FakeKServe() as kube:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
            "users": [{"name": "fake", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        services = InferenceServices(
            KServeApi(client.ApiClient(client.Configuration(host=kube.url)),
                      echo=lambda line: None), "models", "serverless")
        for n in (1, 2):
            services.deploy("penguins", ModelVersion(f"v{n}", n, f"gs://b/penguins-v{n}",
                                                     "2.21.0"), Placement())
        where = ("--target", "gke", "--namespace", "models")
        kube.deny("update", user="alice@example.com")
        for action in ("promote", "rollback"):
            result = run("deploy", action, "penguins", *where)
            assert result.exit_code == 1 and "Traceback" not in result.output
            assert result.output.strip().splitlines()[-1] == (
                "Error: forbidden: User alice@example.com may not update "
                "inferenceservices.serving.kserve.io in namespace models; "
                "deploy/rbac/kserve-deployer.yaml grants it: kubectl apply -n models -f "
                "deploy/rbac/kserve-deployer.yaml, with its bindings' subject set to User "
                "alice@example.com"), result.output
        kube.busy(2)
        kube.denied.clear()
        assert run("deploy", "promote", "penguins", *where).exit_code == 0
        assert kube.traffic(name="penguins") == {"gs://b/penguins-v2": 100}
        kube.unauthorized()
        result = run("deploy", "status", "penguins", *where)
        assert result.exit_code == 1 and "401 Unauthorized" in result.output
    with FakeKServe(installed=False) as kube:
        kubeconfig.write_text(kubeconfig.read_text().replace(
            kubeconfig.read_text().split("server: ")[1].split("\n")[0], kube.url))
        result = run("deploy", "status", "penguins", *where)
        assert result.exit_code == 1 and "KServe is not installed" in result.output
