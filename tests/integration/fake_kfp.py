"""The fake Kubeflow Pipelines v2beta1 server: every request matched to an operation of the
vendored swagger and its body validated with unknown properties forbidden (fakes.py)."""

from __future__ import annotations

import copy
import email.parser
import email.policy
import json
import re
from typing import Any

from gkeflow.components import yamlio
from tests.integration.fake_http import (
    KFP_SWAGGER,
    Conflict,
    Invalid,
    Recorded,
    Server,
    now,
    parse_pipeline_spec_strict,
    task_names,
)

# ---------------------------------------------------------------------------------------------
# Kubeflow Pipelines v2beta1


def _strict_definitions(definitions: dict) -> dict:
    """Forbid unknown properties everywhere; accept JSON numbers for int64 strings."""
    definitions = copy.deepcopy(definitions)

    def walk(schema):
        if isinstance(schema, dict):
            if schema.get("type") == "object" and "properties" in schema \
                    and "additionalProperties" not in schema:
                schema["additionalProperties"] = False
            if schema.get("type") == "string" and schema.get("format") in ("int64", "uint64"):
                schema["type"] = ["string", "integer"]
            for value in schema.values():
                walk(value)
        elif isinstance(schema, list):
            for value in schema:
                walk(value)

    walk(definitions)
    return definitions


class FakeKfpServer(Server):
    """The Kubeflow Pipelines v2beta1 REST API, as far as gkeflow uses it."""

    def __init__(self, expected_token: str | None = None):
        super().__init__()
        self.expected_token = expected_token
        #: healthz tag_name: the backend release (the Kubeflow Platform's current one).
        self.tag_name = "2.16.0"
        self.swagger = json.loads(KFP_SWAGGER.read_text()) if KFP_SWAGGER.exists() else None
        self.pipelines: dict[str, dict] = {}
        self.versions: dict[str, dict] = {}
        self.specs: dict[str, dict] = {}  # version id -> pipeline spec
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.run_scripts: dict[str, list] = {}
        self.recurring_runs: dict[str, dict] = {}
        if self.swagger:
            self._definitions = _strict_definitions(self.swagger["definitions"])
            self._operations = []
            for template, methods in self.swagger["paths"].items():
                pattern = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"
                for method, operation in methods.items():
                    self._operations.append((re.compile(pattern), method.upper(), template,
                                             operation))

    # -- contract checks ----------------------------------------------------------------------

    def _schema_validate(self, instance: Any, schema: dict, what: str) -> None:
        import jsonschema

        root = {"definitions": self._definitions, **_strict_definitions(schema)}
        validator = jsonschema.Draft4Validator(root)
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.path))
        if errors:
            error = errors[0]
            where = "/".join(str(p) for p in error.path) or "(body)"
            raise Invalid(f"{what} violates the KFP swagger at {where}: {error.message}")

    def _operation(self, record: Recorded) -> tuple[str, dict]:
        for pattern, method, template, operation in self._operations:
            if method == record.method and pattern.match(record.path):
                return template, operation
        raise Invalid(f"no {record.method} {record.path} in the KFP v2beta1 swagger")

    def _check_request(self, record: Recorded) -> dict | None:
        """Validate query names and the JSON body; return the parsed body."""
        if self.swagger is None:  # no contract here: parse JSON bodies, nothing more
            content_type = record.headers.get("content-type", "")
            if record.body and "json" in content_type:
                return json.loads(record.body)
            return None
        template, operation = self._operation(record)
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        unknown = set(record.query) - declared
        if unknown:
            raise Invalid(f"query parameters {sorted(unknown)} are not declared for "
                          f"{record.method} {template}")
        body_params = [p for p in operation.get("parameters", []) if p["in"] == "body"]
        if not body_params:
            return None
        try:
            body = json.loads(record.body or b"null")
        except ValueError as exc:
            raise Invalid(f"body is not JSON: {exc}") from None
        self._schema_validate(body, body_params[0]["schema"],
                              f"{record.method} {template} body")
        return body

    def _check_response(self, record: Recorded, status: int, payload: Any) -> None:
        if self.swagger is None or status != 200:
            return
        template, operation = self._operation(record)
        schema = operation["responses"]["200"].get("schema")
        if template.endswith("/healthz"):  # see _route: the server adds these fields
            extra = {"commit_sha", "tag_name", "pipeline_store"}
            payload = {k: v for k, v in payload.items() if k not in extra}
        if schema:
            self._schema_validate(payload, schema, "the fake's own response")

    def error_body(self, status: int, message: str) -> dict:
        code = {400: 3, 401: 16, 403: 7, 404: 5, 409: 6}.get(status, 13 if status >= 500 else 2)
        return {"error": message, "code": code, "message": message, "details": []}

    # -- routing ------------------------------------------------------------------------------

    def route(self, record: Recorded) -> tuple[int, Any]:
        if self.expected_token is not None and \
                record.headers.get("authorization") != f"Bearer {self.expected_token}":
            return 401, self.error_body(401, "Unauthorized: missing or wrong bearer token")
        body = self._check_request(record)
        status, payload = self._route(record, body)
        self._check_response(record, status, payload)
        return status, payload

    def _first(self, record: Recorded, name: str, default: str = "") -> str:
        return record.query.get(name, [default])[0]

    @staticmethod
    def _filter(items: list[dict], filter_text: str) -> list[dict]:
        if not filter_text:
            return items
        predicates = json.loads(filter_text).get("predicates", [])
        for predicate in predicates:
            if predicate.get("operation") not in ("EQUALS", 1):
                raise Invalid(f"fake supports only EQUALS filters, got {predicate}")
            key = predicate["key"]
            value = predicate.get("stringValue", predicate.get("string_value"))
            items = [i for i in items if i.get(key) == value]
        return items

    def _route(self, record: Recorded, body: dict | None) -> tuple[int, Any]:
        path, method = record.path.removeprefix("/apis/v2beta1"), record.method
        with self.lock:
            if path == "/healthz" and method == "GET":
                # The API server's own handler (backend/src/apiserver/main.go
                # healthzResponse) answers more than the swagger's GetHealthzResponse.
                return 200, {"commit_sha": "0" * 40, "tag_name": self.tag_name,
                             "multi_user": False, "pipeline_store": "database"}
            if path == "/pipelines" and method == "GET":
                items = self._filter(list(self.pipelines.values()),
                                     self._first(record, "filter"))
                return 200, {"pipelines": items, "total_size": len(items)}
            if path == "/pipelines" and method == "POST":
                if any(p["name"] == body["name"] for p in self.pipelines.values()):
                    raise Conflict(f"pipeline with name {body['name']} already exists")
                pipeline_id = self.new_id()
                self.pipelines[pipeline_id] = {
                    **body, "pipeline_id": pipeline_id, "created_at": now()}
                return 200, self.pipelines[pipeline_id]
            if path == "/pipelines/upload" and method == "POST":
                return self._upload(record, pipeline_id=None)
            if path == "/pipelines/upload_version" and method == "POST":
                pipeline_id = self._first(record, "pipelineid")
                if pipeline_id not in self.pipelines:
                    raise LookupError(f"pipeline {pipeline_id} not found")
                return self._upload(record, pipeline_id=pipeline_id)
            match = re.fullmatch(r"/pipelines/([^/:]+)", path)
            if match and method == "GET":  # PipelineService.GetPipeline
                if match[1] not in self.pipelines:
                    raise LookupError(f"pipeline {match[1]} not found")
                return 200, self.pipelines[match[1]]
            match = re.fullmatch(r"/pipelines/([^/]+)/versions", path)
            if match and method == "GET":
                items = [v for v in self.versions.values() if v["pipeline_id"] == match[1]]
                items = self._filter(items, self._first(record, "filter"))
                return 200, {"pipeline_versions": [self._public_version(v) for v in items],
                             "total_size": len(items)}
            if path == "/experiments" and method == "GET":
                items = self._filter(list(self.experiments.values()),
                                     self._first(record, "filter"))
                return 200, {"experiments": items, "total_size": len(items)}
            if path == "/experiments" and method == "POST":
                if any(e["display_name"] == body["display_name"]
                       for e in self.experiments.values()):
                    raise Conflict(f"experiment {body['display_name']} already exists")
                experiment = {**body, "experiment_id": self.new_id(), "created_at": now(),
                              "storage_state": "AVAILABLE"}
                self.experiments[experiment["experiment_id"]] = experiment
                return 200, experiment
            if path == "/runs" and method == "POST":
                return 200, self._create_run(body)
            if path == "/runs" and method == "GET":
                experiment = self._first(record, "experiment_id")
                items = [r for r in self.runs.values()
                         if not experiment or r["experiment_id"] == experiment]
                items = self._filter(items, self._first(record, "filter"))
                return 200, {"runs": items, "total_size": len(items)}
            match = re.fullmatch(r"/runs/([^/:]+)", path)
            if match and method == "GET":
                return 200, self._advance_run(match[1])
            if path == "/recurringruns" and method == "POST":
                return 200, self._create_recurring(body)
            if path == "/recurringruns" and method == "GET":
                items = [r for r in self.recurring_runs.values()
                         if r["experiment_id"] == self._first(record, "experiment_id",
                                                              r["experiment_id"])]
                items = self._filter(items, self._first(record, "filter"))
                return 200, {"recurringRuns": items, "total_size": len(items)}
            match = re.fullmatch(r"/recurringruns/([^/:]+)(?::(enable|disable))?", path)
            if match:
                recurring = self.recurring_runs.get(match[1])
                if recurring is None:
                    raise LookupError(f"recurring run {match[1]} not found")
                if method == "DELETE" and not match[2]:
                    del self.recurring_runs[match[1]]
                    return 200, {}
                if method == "GET" and not match[2]:
                    return 200, recurring
                if method == "POST" and match[2]:
                    recurring["mode"] = "ENABLE" if match[2] == "enable" else "DISABLE"
                    recurring["status"] = "ENABLED" if match[2] == "enable" else "DISABLED"
                    return 200, {}
        raise Invalid(f"the fake does not implement {method} {record.path}")

    def _upload(self, record: Recorded, pipeline_id: str | None) -> tuple[int, Any]:
        content_type = record.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            raise Invalid(f"upload must be multipart/form-data, got {content_type!r}")
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + record.body)
        files = {part.get_param("name", header="content-disposition"): part.get_content()
                 for part in message.iter_parts()}
        if "uploadfile" not in files:
            raise Invalid(f"upload has no 'uploadfile' part (parts: {sorted(files)})")
        content = files["uploadfile"]
        docs = list(yamlio.load_all(content))
        if not docs or not isinstance(docs[0], dict):
            raise Invalid("uploaded file is not a pipeline spec YAML")
        parse_pipeline_spec_strict(docs[0], docs[1] if len(docs) > 1 else None)
        name = self._first(record, "name") or docs[0]["pipelineInfo"]["name"]
        if pipeline_id is None:
            if any(p["name"] == name for p in self.pipelines.values()):
                raise Conflict(f"pipeline with name {name} already exists")
            pipeline_id = self.new_id()
            self.pipelines[pipeline_id] = {
                "pipeline_id": pipeline_id, "name": name, "display_name": name,
                "description": self._first(record, "description"), "created_at": now()}
            self._add_version(pipeline_id, name, docs[0])
            return 200, self.pipelines[pipeline_id]
        if any(v["pipeline_id"] == pipeline_id and v["name"] == name
               for v in self.versions.values()):
            raise Conflict(f"pipeline version with name {name} already exists")
        return 200, self._public_version(self._add_version(pipeline_id, name, docs[0],
                                                           self._first(record, "description")))

    def _add_version(self, pipeline_id: str, name: str, spec: dict, description: str = ""):
        version_id = self.new_id()
        version = {"pipeline_id": pipeline_id, "pipeline_version_id": version_id, "name": name,
                   "display_name": name, "description": description, "created_at": now()}
        self.versions[version_id] = version
        self.specs[version_id] = spec
        return version

    @staticmethod
    def _public_version(version: dict) -> dict:
        return dict(version)

    def _spec_for(self, body: dict) -> dict:
        if body.get("pipeline_spec"):
            spec = body["pipeline_spec"]
            parse_pipeline_spec_strict(spec.get("pipeline_spec", spec),
                                       spec.get("platform_spec"))
            return spec.get("pipeline_spec", spec)
        reference = body.get("pipeline_version_reference") or {}
        version = self.versions.get(reference.get("pipeline_version_id", ""))
        if version is None or version["pipeline_id"] != reference.get("pipeline_id"):
            raise Invalid(f"pipeline_version_reference {reference} names no uploaded version")
        return self.specs[version["pipeline_version_id"]]

    def _check_parameters(self, spec: dict, body: dict) -> None:
        declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
        given = (body.get("runtime_config") or {}).get("parameters") or {}
        unknown = set(given) - set(declared)
        if unknown:
            raise Invalid(f"runtime_config.parameters {sorted(unknown)} are not pipeline inputs")

    @staticmethod
    def _check_plugins(body: dict) -> None:
        """``plugins_input`` as KFP 2.17's MLflow plugin reads it (KEP-12862)."""
        plugins = body.get("plugins_input")
        if plugins is None:
            return
        unknown = set(plugins) - {"mlflow"}
        if unknown:
            raise Invalid(f"plugins_input: unknown plugin(s) {sorted(unknown)}")
        mlflow = plugins["mlflow"]
        if set(mlflow) - {"experiment_name", "disabled"}:
            raise Invalid(f"plugins_input.mlflow: unknown keys in {sorted(mlflow)}")
        name = mlflow.get("experiment_name")
        if not isinstance(name, str) or not name.strip():
            raise Invalid("plugins_input.mlflow.experiment_name must be a non-empty string")

    def _create_run(self, body: dict) -> dict:
        if body.get("experiment_id") not in self.experiments:
            raise Invalid(f"experiment_id {body.get('experiment_id')!r} does not exist")
        self._check_plugins(body)
        if not body.get("display_name"):
            raise Invalid("display_name is required")
        spec = self._spec_for(body)
        self._check_parameters(spec, body)
        run_id = f"run-{self.new_id()}"
        run = {**body, "run_id": run_id, "state": "PENDING", "created_at": now(),
               "storage_state": "AVAILABLE"}
        self.runs[run_id] = run
        self.run_scripts[run_id] = self._run_script(task_names(spec))
        return run

    def _advance_run(self, run_id: str) -> dict:
        if run_id not in self.runs:
            raise LookupError(f"run {run_id} not found")
        script = self.run_scripts[run_id]
        state, tasks = script.pop(0) if len(script) > 1 else script[0]
        run = self.runs[run_id]
        run["state"] = state
        run["run_details"] = {"task_details": [
            {"run_id": run_id, "task_id": f"{run_id}-{i}", "display_name": name,
             "state": task_state}
            for i, (name, task_state) in enumerate(sorted(tasks.items()))]}
        if state == "FAILED":
            failed = [n for n, s in tasks.items() if s == "FAILED"]
            run["error"] = {"code": 2, "message": f"task {failed[0]} failed: exit code 1"}
        return run

    def _create_recurring(self, body: dict) -> dict:
        if body.get("experiment_id") not in self.experiments:
            raise Invalid(f"experiment_id {body.get('experiment_id')!r} does not exist")
        self._check_plugins(body)
        for required in ("display_name", "trigger", "max_concurrency"):
            if not body.get(required):
                raise Invalid(f"{required} is required")
        cron = (body["trigger"].get("cron_schedule") or {}).get("cron", "")
        fields = cron.split()
        if len(fields) != 6:
            raise Invalid(f"trigger.cron_schedule.cron {cron!r} must have 6 fields "
                          "(seconds first)")
        concurrency = int(body["max_concurrency"])
        if not 1 <= concurrency <= 10:
            raise Invalid(f"max_concurrency {concurrency} outside [1, 10]")
        if body.get("mode") not in ("ENABLE", "DISABLE"):
            raise Invalid(f"mode {body.get('mode')!r} must be ENABLE or DISABLE")
        spec = self._spec_for(body)
        self._check_parameters(spec, body)
        recurring_id = f"rr-{self.new_id()}"
        recurring = {**body, "recurring_run_id": recurring_id, "created_at": now(),
                     "updated_at": now(), "max_concurrency": str(concurrency),
                     "status": "ENABLED" if body["mode"] == "ENABLE" else "DISABLED"}
        self.recurring_runs[recurring_id] = recurring
        return recurring
