"""The MLflow Model Registry backend against a real MLflow server (tests/integration/
mlflow_server.py): registration, the unchanged dedupe, aliases and the champion gate,
`gkeflow models list/promote`, resolving NAME@VERSION / NAME@ALIAS, a retry after a lost
answer, and one-line errors (server down, credentials refused, URI with credentials)."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.error
import urllib.request
import uuid

import pytest
from click.testing import CliRunner

from gkeflow.components.register.backends import backend_of, open_registry
from gkeflow.components.register.local_registry import RegistryError
from gkeflow.components.register.logic import register_for_pipeline
from gkeflow.components.register.mlflow_registry import parse_mlflow_uri
from gkeflow.components.register.unchanged import training_key
from tests.integration.fake_http import SERVE_FOREVER
from tests.integration.mlflow_server import free_port

INPUTS = "data=sha256:aa;code=;label_column=status;epochs=3;learning_rate=0.01"
CREATE = "/api/2.0/mlflow/model-versions/create"


@pytest.fixture
def name() -> str:
    """A model name of its own per test (the server lives for the whole session)."""
    return f"churn-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def registry_uri(mlflow_server) -> str:
    return f"mlflow://127.0.0.1:{mlflow_server.port}"


def _register(uri, settings, model_dir, name, run_id, model_uri, inputs=INPUTS, aliases=""):
    return register_for_pipeline(
        model_path=str(model_dir), model_uri=model_uri, model_name=name,
        metrics_metadata={"accuracy": 0.9, "auc": 0.8125}, run_id=run_id,
        task_key="register-model", registry_uri=uri, aliases=aliases, labels="team=ml",
        data_uri="gs://b/data.csv", settings=settings, training_inputs=inputs)


def _versions_on_server(server, name: str) -> list[dict]:
    answer = server.api("model-versions/search", filter=f"name = '{name}'")
    return answer.get("model_versions", [])


class _Proxy:
    """A loopback HTTP proxy in front of the MLflow server; ``hook(handler, path)`` may answer
    a request itself (return True) before it is passed on, ``drop_answer(path)`` may forward a
    request and then close the connection without answering."""

    def __init__(self, upstream: str, hook=None, drop_answer=None):
        self.upstream, self.hook, self.drop_answer = upstream, hook, drop_answer
        self.requests: list[tuple[str, str, dict]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                proxy.requests.append((self.command, self.path, dict(self.headers)))
                if proxy.hook and proxy.hook(self, self.path):
                    return
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=body, method=self.command,
                    headers={"Content-Type": self.headers.get("Content-Type",
                                                              "application/json")})
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        status, data = response.status, response.read()
                except urllib.error.HTTPError as exc:
                    status, data = exc.code, exc.read()
                if proxy.drop_answer and proxy.drop_answer(self.path):
                    self.close_connection = True
                    self.connection.close()  # the server did it; the answer is lost
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs=SERVE_FOREVER, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


# --- URIs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("uri, url", [
    ("mlflow://mlflow.example:5000", "http://mlflow.example:5000"),
    ("mlflow+http://10.0.0.3:5000/", "http://10.0.0.3:5000"),
    ("mlflow+https://mlflow.example.com", "https://mlflow.example.com"),
    ("mlflow+https://example.com:8443/mlflow", "https://example.com:8443/mlflow"),
])
def test_mlflow_uris_name_the_server(uri, url):
    assert backend_of(uri) == "mlflow"
    assert parse_mlflow_uri(uri) == url


@pytest.mark.parametrize("uri", ["mlflow+https://alice:secret@example.com",
                                 "mlflow://token@example.com:5000"])
def test_credentials_in_the_uri_are_refused_without_echoing_them(uri):
    with pytest.raises(RegistryError) as caught:
        parse_mlflow_uri(uri)
    message = str(caught.value)
    assert "\n" not in message and "MLFLOW_TRACKING_TOKEN" in message
    assert "secret" not in message and "token@" not in message


@pytest.mark.parametrize("uri", ["mlflow://", "mlflow://host:notaport", "mlflow://h:1?x=1"])
def test_malformed_mlflow_uris_are_refused(uri):
    with pytest.raises(RegistryError, match="invalid MLflow registry URI"):
        parse_mlflow_uri(uri)


# --- registration ---------------------------------------------------------------------------


def test_register_records_source_metrics_and_lineage(mlflow_server, registry_uri, name,
                                                     saved_model_dir, fast_retries):
    outcome = _register(registry_uri, fast_retries(), saved_model_dir, name, "run-1",
                        "gs://b/run-1/model", aliases="candidate")
    assert outcome.created and outcome.backend == "mlflow"
    assert outcome.version.version == 1 and outcome.version.aliases == ("candidate",)
    assert outcome.message.startswith(f"registered {name} version 1 in the mlflow registry")

    [stored] = _versions_on_server(mlflow_server, name)
    assert stored["source"] == "gs://b/run-1/model"
    tags = {t["key"]: t["value"] for t in stored["tags"]}
    assert tags["gkeflow.metric.accuracy"] == "0.9"
    assert tags["gkeflow.pipeline_run_id"] == "run-1"
    assert tags["gkeflow.label.team"] == "ml"
    assert tags["gkeflow.lineage.data_uri"] == "gs://b/data.csv"
    assert tags["gkeflow.lineage.training_key"] == training_key(INPUTS)
    model = mlflow_server.api("registered-models/get", name=name)["registered_model"]
    assert [a["alias"] for a in model["aliases"]] == ["candidate"]

    back = open_registry(registry_uri, fast_retries()).get(name, 1)
    assert back.metrics == {"accuracy": 0.9, "auc": 0.8125}
    assert back.uri == "gs://b/run-1/model" and back.run_id == "run-1"
    assert back.lineage["data_uri"] == "gs://b/data.csv"


def test_a_second_identical_registration_registers_nothing_new(mlflow_server, registry_uri,
                                                                name, saved_model_dir,
                                                                fast_retries):
    first = _register(registry_uri, fast_retries(), saved_model_dir, name, "run-1",
                      "gs://b/run-1/model")
    again = _register(registry_uri, fast_retries(), saved_model_dir, name, "run-2",
                      "gs://b/run-2/model", aliases="candidate")
    assert (again.created, again.unchanged) == (False, True)
    assert again.version.version == first.version.version == 1
    assert again.message.startswith(f"unchanged: same as version 1 of {name}")
    assert again.version.aliases == ("candidate",)
    assert len(_versions_on_server(mlflow_server, name)) == 1

    other = _register(registry_uri, fast_retries(), saved_model_dir, name, "run-3",
                      "gs://b/run-3/model", inputs=INPUTS + ";epochs=4")
    assert other.created and other.version.version == 2


def test_the_same_run_and_task_registering_twice_leaves_one_version(mlflow_server,
                                                                   registry_uri, name,
                                                                   fast_retries):
    registry = open_registry(registry_uri, fast_retries())
    first, created = registry.register(name, "gs://b/m", {"accuracy": 0.9}, "run-1")
    again, created_again = registry.register(name, "gs://b/m", {"accuracy": 0.9}, "run-1")
    assert (created, created_again) == (True, False)
    assert again.version == first.version == 1
    assert len(_versions_on_server(mlflow_server, name)) == 1


def test_a_local_model_is_uploaded_once_and_registered_from_the_server(
        mlflow_server, registry_uri, name, saved_model_dir, fast_retries):
    registry = open_registry(registry_uri, fast_retries())
    first, created = registry.register(name, str(saved_model_dir), {"accuracy": 0.9}, "run-1")
    again, created_again = registry.register(name, str(saved_model_dir), {"accuracy": 0.9},
                                             "run-1")
    assert (created, created_again) == (True, False)
    assert first.uri == again.uri == str(saved_model_dir)  # what local deploys read
    [stored] = _versions_on_server(mlflow_server, name)
    run_id = stored["run_id"]
    assert mlflow_server.artifacts(run_id) == ["model/saved_model.pb"]
    assert mlflow_server.artifact_bytes(run_id, "model/saved_model.pb") == b"\x08\x01"
    key = {t["key"]: t["value"] for t in stored["tags"]}["gkeflow.retry_key"]
    experiment = mlflow_server.api("experiments/get-by-name",
                                   experiment_name="gkeflow-registered-models")["experiment"]
    uploads = mlflow_server.search_runs(experiment["experiment_id"],
                                        f"tags.`gkeflow.retry_key` = '{key}'")
    assert [r["info"]["run_id"] for r in uploads] == [run_id]  # the retry uploaded nothing


def test_a_create_whose_answer_was_lost_is_found_not_repeated(mlflow_server, name,
                                                             fast_retries):
    dropped = []

    def drop_first_create(path):
        if path.startswith(CREATE) and not dropped:
            dropped.append(path)
            return True
        return False

    with _Proxy(mlflow_server.url, drop_answer=drop_first_create) as proxy:
        registry = open_registry(f"mlflow://127.0.0.1:{proxy.port}", fast_retries())
        version, created = registry.register(name, "gs://b/m", {"accuracy": 0.9}, "run-1")
    assert dropped, "the proxy never saw the create"
    assert version.version == 1 and created is False  # found by the retry
    assert len(_versions_on_server(mlflow_server, name)) == 1
    assert sum(1 for _, path, _ in proxy.requests if path.startswith(CREATE)) == 1


# --- aliases, champion gate, CLI, resolving -------------------------------------------------


def test_aliases_feed_the_champion_gate_and_promote_moves_them(registry_uri, name,
                                                              fast_retries):
    from gkeflow.components.evaluate.logic import find_champion

    registry = open_registry(registry_uri, fast_retries())
    assert find_champion(registry_uri, name) is None
    assert registry.get_by_alias(name, "champion") is None
    registry.register(name, "gs://b/1", {"accuracy": 0.8}, "run-1", aliases=("champion",))
    registry.register(name, "gs://b/2", {"accuracy": 0.9}, "run-2", aliases=("candidate",))
    champion = find_champion(registry_uri, name)
    assert (champion.version, champion.metrics["accuracy"]) == (1, 0.8)

    promoted = registry.set_alias(name, 2, "champion")
    assert promoted.aliases == ("candidate", "champion")
    assert registry.get_by_alias(name, "champion").version == 2
    assert registry.get(name, 1).aliases == ()
    with pytest.raises(RegistryError, match="has no version 7"):
        registry.set_alias(name, 7, "champion")


def test_models_cli_lists_and_promotes_through_the_mlflow_registry(registry_uri, name,
                                                                  fast_retries, tmp_path,
                                                                  monkeypatch):
    from gkeflow.pipelines.cli.main import main

    monkeypatch.chdir(tmp_path)  # no gkeflow.yaml here
    registry = open_registry(registry_uri, fast_retries())
    registry.register(name, "gs://b/1", {"accuracy": 0.8}, "run-1", aliases=("champion",))
    registry.register(name, "gs://b/2", {"accuracy": 0.9}, "run-2")
    runner = CliRunner()
    promoted = runner.invoke(main, ["models", "promote", name, "2", "--registry", registry_uri])
    assert promoted.exit_code == 0, promoted.output
    assert f"{name} version 2 is now 'champion'" in promoted.output
    listed = runner.invoke(main, ["models", "list", "--name", name, "--registry", registry_uri,
                                  "--format", "json"])
    assert listed.exit_code == 0, listed.output
    records = json.loads(listed.output)
    assert [(r["version"], r["aliases"]) for r in records] == [(1, []), (2, ["champion"])]
    missing = runner.invoke(main, ["models", "promote", name, "9", "--registry", registry_uri])
    assert missing.exit_code == 1 and "Traceback" not in missing.output
    assert "has no version 9" in missing.output


def test_deploy_resolves_name_at_version_and_alias(registry_uri, name, fast_retries):
    from gkeflow.components.predict.resolve import (
        PredictError,
        parse_model_ref,
        resolve_version,
    )

    registry = open_registry(registry_uri, fast_retries())
    registry.register(name, "gs://b/1", {"accuracy": 0.8}, "run-1")
    registry.register(name, "gs://b/2", {"accuracy": 0.9}, "run-2", aliases=("candidate",))
    by_version, _ = resolve_version(registry_uri, parse_model_ref(f"{name}@1"))
    by_alias, _ = resolve_version(registry_uri, parse_model_ref(f"{name}@candidate"))
    newest, note = resolve_version(registry_uri, parse_model_ref(name))
    assert (by_version.uri, by_alias.uri, newest.uri) == ("gs://b/1", "gs://b/2", "gs://b/2")
    assert "no 'champion' alias yet" in note
    with pytest.raises(PredictError, match="has no version 5 in the registry"):
        resolve_version(registry_uri, parse_model_ref(f"{name}@5"))


# --- failures -------------------------------------------------------------------------------


def test_a_server_that_is_down_fails_in_one_line_naming_it(name, fast_retries):
    uri = f"mlflow://127.0.0.1:{free_port()}"
    registry = open_registry(uri, fast_retries(attempts=2))
    with pytest.raises(RegistryError) as caught:
        registry.list(name=name)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300
    assert f"http://127.0.0.1:{uri.rsplit(':', 1)[1]}" in message
    assert "is the server running" in message


def test_credentials_come_from_the_environment_and_refusal_is_one_line(mlflow_server, name,
                                                                      fast_retries,
                                                                      monkeypatch):
    seen = []

    def require_token(handler, path):
        seen.append(handler.headers.get("Authorization", ""))
        if handler.headers.get("Authorization") == "Bearer good":
            return False
        handler.send_response(401)
        handler.send_header("Content-Length", "12")
        handler.end_headers()
        handler.wfile.write(b"unauthorized")
        return True

    with _Proxy(mlflow_server.url, hook=require_token) as proxy:
        uri = f"mlflow://127.0.0.1:{proxy.port}"
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "bad")
        with pytest.raises(RegistryError) as caught:
            open_registry(uri, fast_retries()).list(name=name)
        message = str(caught.value)
        assert "\n" not in message and "HTTP 401" in message
        assert "MLFLOW_TRACKING_TOKEN" in message and "bad" not in message.split("(")[0]
        assert len(seen) == 1  # refused credentials are not retried

        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "good")
        version, created = open_registry(uri, fast_retries()).register(
            name, "gs://b/m", {"accuracy": 0.9}, "run-1")
    assert created and version.version == 1
    assert seen[-1] == "Bearer good"


def test_an_address_that_is_not_mlflow_fails_in_one_line(mlflow_server, name, fast_retries):
    def sign_in_page(handler, path):
        page = b"<html><body>Sign in</body></html>"
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", str(len(page)))
        handler.end_headers()
        handler.wfile.write(page)
        return True

    with _Proxy(mlflow_server.url, hook=sign_in_page) as proxy:
        registry = open_registry(f"mlflow://127.0.0.1:{proxy.port}", fast_retries())
        for call in (lambda: registry.list(name=name),
                     lambda: registry.register(name, "gs://b/m", {}, "run-1")):
            with pytest.raises(RegistryError) as caught:
                call()
            message = str(caught.value)
            assert "\n" not in message and "not MLflow's REST API" in message
            assert f"127.0.0.1:{proxy.port}" in message


def test_an_invalid_model_name_fails_before_any_call(fast_retries):
    registry = open_registry(f"mlflow://127.0.0.1:{free_port()}", fast_retries())
    with pytest.raises(RegistryError, match="invalid model name 'Churn Model'"):
        registry.register("Churn Model", "gs://b/m", {}, "run-1")
