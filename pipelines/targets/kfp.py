"""Kubeflow Pipelines on GKE: :class:`KfpBackend`, through ``kfp.Client`` (v2beta1 API).

Every remote call goes through :func:`gkeflow.pipelines.targets.transport.call` with urllib3's own
retries turned off, so one call takes at most ``(retries + 1) x timeout_s`` plus backoff.
Creates are idempotent: the name gkeflow chose is looked up before any retry, so a create
the server executed before failing is found instead of made twice. With ``dry_run`` no
client is built and nothing is read: every request is recorded as a
:class:`~gkeflow.pipelines.targets.backends.PlannedRequest`, server-assigned ids as placeholders.

This module holds the client, the calls, experiments and runs; pipelines and their versions
are in :mod:`~gkeflow.pipelines.targets.kfp_pipelines`, recurring runs in
:mod:`~gkeflow.pipelines.targets.kfp_schedules`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from gkeflow.pipelines.settings.remote_config import GkeTarget
from gkeflow.pipelines.targets.backends import (
    PlannedRequest,
    PreparedPipeline,
    RunStatus,
    TargetBackend,
    normalise_state,
    quiet,
)
from gkeflow.pipelines.targets.kfp_pipelines import KfpPipelineVersions, name_filter
from gkeflow.pipelines.targets.kfp_plugins import create_run_with_plugins
from gkeflow.pipelines.targets.kfp_schedules import KfpRecurringRuns
from gkeflow.pipelines.targets.transport import (
    RemoteError,
    RetryPolicy,
    call,
    no_library_retries,
    register_secret,
)

# ---------------------------------------------------------------------------------------------
# Kubeflow Pipelines


def _kfp_client_class():
    import kfp

    class _Client(kfp.Client):
        """``kfp.Client`` whose health check obeys gkeflow's timeout and retry policy
        (the stock one retries five times, five seconds apart, without a timeout)."""

        _gkeflow_policy = RetryPolicy()

        _gkeflow_namespace = "kubeflow"

        def _load_context_setting_or_default(self):
            # gkeflow names the namespace (targets.gke.namespace): without one, kfp.Client
            # would spend a health-check request at construction to guess it.
            super()._load_context_setting_or_default()
            self._context_setting["namespace"] = self._gkeflow_namespace

        def _load_config(self, *args, **kwargs):
            config = super()._load_config(*args, **kwargs)
            config.retries = no_library_retries()  # urllib3 would retry 3x inside each attempt
            return config

        def get_kfp_healthz(self, sleep_duration: int = 5):
            return call("Kubeflow Pipelines health check",
                        lambda: self._healthz_api.healthz_service_get_healthz(
                            _request_timeout=(self._gkeflow_policy.timeout_s,
                                              self._gkeflow_policy.timeout_s)),
                        self._gkeflow_policy)

    return _Client


def _is_web_page(response) -> bool:
    """An HTML answer (a sign-in page, another web site) where the API answers JSON."""
    content_type = (response.getheader("Content-Type") or "").lower()
    if "html" in content_type:
        return True
    data = getattr(response, "data", None)
    return not content_type and isinstance(data, bytes) and data.lstrip()[:1] == b"<"


class KfpBackend(KfpPipelineVersions, KfpRecurringRuns, TargetBackend):
    """Kubeflow Pipelines on GKE, through ``kfp.Client``."""

    target_name = "gke"

    def __init__(self, target: GkeTarget, *, dry_run: bool = False,
                 policy: RetryPolicy | None = None):
        super().__init__(target, dry_run=dry_run, policy=policy)
        self._client = None
        self._experiment_id: str | None = None

    # -- connection ---------------------------------------------------------------------------

    def _token(self) -> str | None:
        auth = self.target.auth
        if auth.token_env:
            token = os.environ.get(auth.token_env, "").strip()  # a file's newline, say
            register_secret(token)
            if token and not re.fullmatch(r"[\x21-\x7e]+", token):
                from gkeflow.pipelines.targets.credentials import CredentialsError

                raise CredentialsError(
                    f"the token in environment variable {auth.token_env} holds a space, a "
                    "line break or a character that is not ASCII; export the bearer token "
                    "alone")
            if not token:
                from gkeflow.pipelines.targets.credentials import CredentialsError

                raise CredentialsError(
                    f"environment variable {auth.token_env} is empty or not set "
                    "(targets.gke.auth.token_env names it); export the Kubeflow Pipelines "
                    "bearer token there")
            register_secret(token)
            return token
        if auth.google:
            from gkeflow.pipelines.targets.credentials import google_access_token

            token = google_access_token(self.policy.timeout_s, "targets.gke.auth.google")
            register_secret(token)
            return token
        return None

    @property
    def auth_header(self) -> dict[str, str]:
        auth = self.target.auth
        if auth.token_env or auth.google:
            return {"Authorization": "Bearer ***"}
        if auth.iap_client_id:
            return {"Authorization": "Bearer *** (IAP ID token)"}
        return {}

    @property
    def client(self):
        if self._client is None:
            client_class = _kfp_client_class()
            client_class._gkeflow_policy = self.policy
            client_class._gkeflow_namespace = self.target.namespace
            token = self._token()
            import warnings

            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "This client only works", FutureWarning)
                self._client = quiet(lambda: client_class(
                    host=self.target.host, existing_token=token,
                    client_id=self.target.auth.iap_client_id,
                    namespace=self.target.namespace, ui_host=self.target.ui_url))()
            self._apply_timeout(self._client)
        return self._client

    def _apply_timeout(self, client) -> None:
        """Give every request of this client a timeout (kfp.Client sets none), and refuse
        an answer that is a web page: kfp.Client would read it as an empty result."""
        rest = client._run_api.api_client.rest_client
        original = rest.request
        timeout = self.policy.timeout_s

        def request(method, url, *args, **kwargs):
            if not kwargs.get("_request_timeout"):
                kwargs["_request_timeout"] = (timeout, timeout)
            response = original(method, url, *args, **kwargs)
            if _is_web_page(response):
                raise RemoteError(
                    f"{self.target.host} answered {method} {urlsplit(url).path} with a web "
                    "page, not the Kubeflow Pipelines API: a sign-in page means the request "
                    "was not authenticated (set targets.gke.auth); otherwise point "
                    "targets.gke.host at the Pipelines API or UI address",
                    response.status)
            return response

        rest.request = request

    def call(self, what: str, func, *, idempotent: bool = True, recover=None):
        try:
            return call(what, quiet(func), self.policy, idempotent=idempotent,
                        recover=quiet(recover) if recover else None)
        except RemoteError as exc:
            hint = self._hint(exc.status)
            if not hint:
                raise
            raise RemoteError(f"{exc}; {hint}", exc.status) from None

    def _hint(self, status: int | None) -> str:
        """What to check after a failed call: the host, or the credentials."""
        auth = self.target.auth
        if status in (401, 403):
            if auth.token_env:
                return (f"check the Kubeflow Pipelines token in ${auth.token_env} "
                        "(targets.gke.auth.token_env)")
            if auth.google or auth.iap_client_id:
                return ("check your Google credentials (`gcloud auth application-default "
                        "login`) and their access to the cluster")
            return "the server wants credentials: set targets.gke.auth in gkeflow.yaml"
        if status is None:
            return (f"check that targets.gke.host ({self.target.host}) is right and "
                    "reachable from here")
        return ""

    def once(self, what: str, func):
        """One request, no retry: the look-ups that make creates idempotent (``call``
        counts them against the create's own attempts)."""
        return call(what, quiet(func), replace(self.policy, attempts=1))

    def _plan(self, method: str, path: str, body=None, note: str = "") -> None:
        self.planned.append(PlannedRequest(method, f"{self.target.host}{path}", body,
                                           self.auth_header, note))

    @property
    def ui_url(self) -> str:
        return self.target.ui_url or self.target.host

    def run_url(self, run_id: str) -> str:
        return f"{self.ui_url}/#/runs/details/{run_id}"

    def backend_tag(self) -> str:
        """The backend's release (``GET /apis/v2beta1/healthz`` -> ``tag_name``), read raw:
        the API server answers more fields than the generated client keeps."""
        def read():
            response = self.client._healthz_api.healthz_service_get_healthz(
                _preload_content=False)
            return json.loads(response.data or b"{}")

        return str(self.call("read the Kubeflow Pipelines version", read).get("tag_name", ""))

    # -- experiments and runs -----------------------------------------------------------------

    def _find_experiment(self):
        try:
            return self.client.get_experiment(experiment_name=self.target.experiment,
                                              namespace=self.target.namespace)
        except ValueError:  # kfp.Client: "No experiment is found with name ..."
            return None

    def experiment_id(self, create: bool = True) -> str | None:
        if self._experiment_id:
            return self._experiment_id
        name = self.target.experiment
        if self.dry_run:
            planned = {(p.method, p.url.split("?")[0]) for p in self.planned}
            url = f"{self.target.host}/apis/v2beta1/experiments"
            if ("GET", url) not in planned:
                self._plan("GET", "/apis/v2beta1/experiments?filter="
                           + name_filter("display_name", name), note="look up the experiment")
            if create and ("POST", url) not in planned:
                self._plan("POST", "/apis/v2beta1/experiments",
                           {"display_name": name, "namespace": self.target.namespace},
                           note="only if the experiment does not exist")
            return "<experiment_id>"
        experiment = self.call(f"look up experiment {name!r}", self._find_experiment)
        if experiment is None:
            if not create:
                return None
            experiment = self.call(
                f"create experiment {name!r}",
                lambda: self.client.create_experiment(name, namespace=self.target.namespace),
                idempotent=False,
                recover=lambda: self.once(f"look up experiment {name!r}",
                                           self._find_experiment))
        self._experiment_id = experiment.experiment_id
        return self._experiment_id

    def _find_run(self, experiment_id: str, run_name: str):
        response = self.client.list_runs(experiment_id=experiment_id, page_size=10,
                                         filter=name_filter("display_name", run_name))
        runs = [r for r in response.runs or [] if r.display_name == run_name]
        return runs[0] if runs else None

    def create_run(self, prepared: PreparedPipeline, pipeline_id: str, version_id: str,
                   run_name: str, parameters: dict[str, Any],
                   plugins_input: dict | None = None) -> str:
        """Create the run; ``run_name`` is unique (gkeflow generates it), so a retry first
        looks the run up by name in the experiment and never starts it twice.
        ``plugins_input``: the backend plugins' settings (KFP >= 2.17, e.g. the MLflow
        experiment), sent as the run's ``plugins_input``."""
        experiment_id = self.experiment_id()
        body = {
            "experiment_id": experiment_id, "display_name": run_name,
            "pipeline_version_reference": {"pipeline_id": pipeline_id,
                                           "pipeline_version_id": version_id},
            "runtime_config": {"parameters": parameters,
                               **({"pipeline_root": self.target.pipeline_root}
                                  if self.target.pipeline_root else {})},
            **({"service_account": self.target.service_account}
               if self.target.service_account else {}),
            **({"plugins_input": plugins_input} if plugins_input else {}),
        }
        if self.dry_run:
            self._plan("POST", "/apis/v2beta1/runs", body,
                       note="retried only after looking the run up by display_name")
            return "<run_id>"
        run = self.call(
            f"create run {run_name!r}",
            lambda: self._run_pipeline(
                experiment_id, run_name, params=parameters, pipeline_id=pipeline_id,
                version_id=version_id, pipeline_root=self.target.pipeline_root,
                service_account=self.target.service_account, plugins_input=plugins_input),
            idempotent=False,
            recover=lambda: self.once(f"look up run {run_name!r}",
                                       lambda: self._find_run(experiment_id, run_name)))
        return run.run_id

    def _run_pipeline(self, experiment_id: str, run_name: str, *, plugins_input, **kwargs):
        if not plugins_input:
            return self.client.run_pipeline(experiment_id, run_name, **kwargs)
        return create_run_with_plugins(self.client, experiment_id, run_name, plugins_input,
                                       **kwargs)

    def run_status(self, run_id: str) -> RunStatus:
        run = self.call(f"get run {run_id}", lambda: self.client.get_run(run_id))
        tasks = {}
        details = getattr(run, "run_details", None)
        for task in (getattr(details, "task_details", None) or []):
            name = task.display_name or task.task_id
            if name and name != "root" and not name.endswith(("-driver", "root-system")):
                tasks[name] = normalise_state(task.state)
        error = getattr(getattr(run, "error", None), "message", "") or ""
        return RunStatus(run_id, normalise_state(run.state), tasks, error)
