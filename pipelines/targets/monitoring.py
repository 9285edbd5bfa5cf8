"""Cloud Monitoring alert policies on idle GPUs: what `gkeflow monitoring apply` sends.

Two policies per environment, each with one threshold condition on the mean GPU duty
cycle of a training job:

- GKE: ``kubernetes.io/container/accelerator/duty_cycle`` (0-100) of ``k8s_container``
  series whose pod carries gkeflow's labels (``metadata.user_labels."KEY"``), per pod;
- Vertex AI: ``ml.googleapis.com/training/accelerator/utilization`` (a fraction, 0-1) of
  ``cloudml_job`` series (custom training jobs), per job.

The Monitoring v3 REST API (``/v3/projects/P/alertPolicies``) is spoken directly, with the
``google.cloud.monitoring_v3`` message types for every body: that library only ships a gRPC
transport, and REST keeps one transport (:func:`~gkeflow.pipelines.targets.transport.call`:
bounded retries on 429, 5xx and lost connections) for every target.

Idempotent: a policy is identified by its display name and the user label
``managed-by: gkeflow``. Existing policies are listed first; a missing one is created, one
that differs is patched with an ``updateMask`` naming the differing fields, an equal one is
left alone. A create whose answer was lost is looked up (by the same name and label) before
any retry, so a second policy is never made. A policy of the same name without the label is
someone else's and is refused, not overwritten.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gkeflow.pipelines.settings.monitoring_config import DEFAULT_ENVIRONMENT, MonitoringSettings
from gkeflow.pipelines.targets.backends import PlannedRequest
from gkeflow.pipelines.targets.transport import RemoteError, RetryPolicy, call

DEFAULT_ENDPOINT = "https://monitoring.googleapis.com"
MANAGED_LABEL = ("managed-by", "gkeflow")
POLICY_LABEL = "gkeflow-policy"
ENVIRONMENT_LABEL = "gkeflow-environment"
GKE_METRIC = "kubernetes.io/container/accelerator/duty_cycle"
VERTEX_METRIC = "ml.googleapis.com/training/accelerator/utilization"
#: The fields gkeflow sets; the rest (name, records, condition names) are the server's.
MANAGED_FIELDS = ("display_name", "documentation", "user_labels", "conditions", "combiner",
                  "enabled", "notification_channels", "severity")
_LOCAL = re.compile(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?$")


class MonitoringError(RuntimeError):
    """An alert policy cannot be applied; the message says which and what to do."""


@dataclass(frozen=True)
class Outcome:
    """What `apply` did (or, dry, would do) to one policy."""

    display_name: str
    action: str  # created | updated | unchanged | planned
    name: str = ""  # projects/P/alertPolicies/ID
    fields: tuple[str, ...] = ()  # the updated fields


def display_name(kind: str, environment: str) -> str:
    """``gkeflow: idle GPUs in GKE training`` (plus `` (ENV)`` outside the default)."""
    where = {"gke": "GKE", "vertex": "Vertex AI"}[kind]
    suffix = "" if environment == DEFAULT_ENVIRONMENT else f" ({environment})"
    return f"gkeflow: idle GPUs in {where} training{suffix}"


def _duration(minutes: int) -> str:
    return f"{minutes * 60}s"


def desired_policies(settings: MonitoringSettings, environment: str) -> list[dict[str, Any]]:
    """The alert policies of ``settings``, as Monitoring v3 JSON (camelCase) bodies."""
    idle = settings.gpu_idle
    policies = []
    if settings.gke.enabled:
        selectors = " AND ".join(f'metadata.user_labels.{json.dumps(key)} = {json.dumps(value)}'
                                 for key, value in sorted(settings.gke.pod_labels.items()))
        policies.append(_policy(
            "gke", environment, settings, idle.threshold_percent,
            f'resource.type = "k8s_container" AND metric.type = "{GKE_METRIC}" AND {selectors}',
            ["resource.label.project_id", "resource.label.location",
             "resource.label.cluster_name", "resource.label.namespace_name",
             "resource.label.pod_name"],
            "the GPU duty cycle (percent of time a kernel ran) of a gkeflow training pod"))
    if settings.vertex.enabled:
        policies.append(_policy(
            "vertex", environment, settings, idle.threshold_percent / 100,
            f'resource.type = "cloudml_job" AND metric.type = "{VERTEX_METRIC}"',
            ["resource.label.project_id", "resource.label.job_id"],
            "the accelerator utilisation (a fraction, 0-1) of a Vertex AI custom training "
            "job"))
    for policy in policies:  # a body the API would refuse fails here, before any call
        validated(policy)
    return policies


def validated(policy: dict[str, Any]) -> dict[str, Any]:
    """``policy`` if it parses strictly as a ``monitoring_v3.AlertPolicy``."""
    from google.cloud import monitoring_v3
    from google.protobuf import json_format

    json_format.ParseDict(policy, monitoring_v3.AlertPolicy.pb()(), ignore_unknown_fields=False)
    return policy


def _policy(kind: str, environment: str, settings: MonitoringSettings, threshold: float,
            filter_: str, group_by: list[str], what: str) -> dict[str, Any]:
    idle = settings.gpu_idle
    name = display_name(kind, environment)
    content = (
        f"The mean of {what} stayed below {idle.threshold_percent:g}% for "
        f"{idle.duration_minutes} minutes. Paid GPUs are waiting: most often on the input "
        "pipeline (reading or decoding data), or the batch is too small to fill them. "
        "Check the run's GPU utilisation metrics; see docs/costs.md, \"Alerts on idle GPUs\". "
        "Managed by `gkeflow monitoring apply`: edit gkeflow.yaml, not this policy.")
    return {
        "displayName": name,
        "documentation": {"content": content, "mimeType": "text/markdown"},
        "userLabels": {MANAGED_LABEL[0]: MANAGED_LABEL[1], POLICY_LABEL: f"gpu-idle-{kind}",
                       ENVIRONMENT_LABEL: environment},
        "conditions": [{
            "displayName": f"mean GPU use below {idle.threshold_percent:g}% for "
                           f"{idle.duration_minutes} min",
            "conditionThreshold": {
                "filter": filter_,
                "aggregations": [{
                    "alignmentPeriod": _duration(idle.alignment_minutes),
                    "perSeriesAligner": "ALIGN_MEAN",
                    "crossSeriesReducer": "REDUCE_MEAN",
                    "groupByFields": group_by,
                }],
                "comparison": "COMPARISON_LT",
                "thresholdValue": threshold,
                "duration": _duration(idle.duration_minutes),
                "trigger": {"count": 1},
            },
        }],
        "combiner": "OR",
        "enabled": True,
        "notificationChannels": list(settings.notification_channels),
        "severity": "WARNING",
    }


def _canonical(policy: dict[str, Any]) -> dict[str, Any]:
    """The managed fields of a policy, normalised through the proto (defaults dropped,
    server-assigned condition names removed) so that equal policies compare equal."""
    from google.cloud import monitoring_v3
    from google.protobuf import json_format

    message = monitoring_v3.AlertPolicy.pb()()
    json_format.ParseDict(policy, message, ignore_unknown_fields=True)
    data = json_format.MessageToDict(message)
    for condition in data.get("conditions", []):
        condition.pop("name", None)
    return {field: data.get(_camel(field)) for field in MANAGED_FIELDS}


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


def differing_fields(existing: dict[str, Any], desired: dict[str, Any]) -> list[str]:
    """The managed fields (camelCase, as an updateMask names them) that differ."""
    have, want = _canonical(existing), _canonical(desired)
    return [_camel(field) for field in MANAGED_FIELDS if have[field] != want[field]]


def _is_ours(policy: dict[str, Any]) -> bool:
    return policy.get("userLabels", {}).get(MANAGED_LABEL[0]) == MANAGED_LABEL[1]


class AlertPolicies:
    """The ``projects/P/alertPolicies`` collection, over REST."""

    def __init__(self, project: str, endpoint: str = "", *, session=None,
                 policy: RetryPolicy | None = None,
                 sleep: Callable[[float], None] | None = None):
        self.project = project
        self.endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        self.policy = policy or RetryPolicy()
        self._session = session
        self._sleep = sleep

    @property
    def collection_url(self) -> str:
        return f"{self.endpoint}/v3/projects/{self.project}/alertPolicies"

    def _session_for_calls(self):
        if self._session is None:
            if _LOCAL.match(self.endpoint):  # a local emulator needs no credentials
                import requests

                self._session = requests.Session()
            else:
                from google.auth.transport.requests import AuthorizedSession

                from gkeflow.pipelines.targets.credentials import google_credentials

                self._session = AuthorizedSession(google_credentials("monitoring apply"))
        return self._session

    def _request(self, method: str, url: str, **kwargs) -> dict[str, Any]:
        from google.api_core import exceptions

        response = self._session_for_calls().request(method, url,
                                                     timeout=self.policy.timeout_s, **kwargs)
        if response.status_code >= 400:
            raise exceptions.from_http_response(response)
        return response.json() if response.content else {}

    def _call(self, what: str, func, **kwargs):
        extra = {"sleep": self._sleep} if self._sleep else {}
        return call(what, func, self.policy, **extra, **kwargs)

    def list(self) -> list[dict[str, Any]]:
        """Every alert policy of the project (all pages)."""
        policies: list[dict[str, Any]] = []
        token = ""
        while True:
            params = {"pageSize": 1000, **({"pageToken": token} if token else {})}
            page = self._call(f"listing the alert policies of {self.project}",
                              lambda params=params: self._request(
                                  "GET", self.collection_url, params=params))
            policies += page.get("alertPolicies", [])
            token = page.get("nextPageToken", "")
            if not token:
                return policies

    def find(self, display_name: str) -> list[dict[str, Any]]:
        """The policies named ``display_name``."""
        return [p for p in self.list() if p.get("displayName") == display_name]

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create ``body``; a lost answer is looked up before any retry."""

        def recover():
            ours = [p for p in self.find(body["displayName"]) if _is_ours(p)]
            return ours[0] if ours else None

        return self._call(f"creating the alert policy {body['displayName']!r}",
                          lambda: self._request("POST", self.collection_url, json=body),
                          idempotent=False, recover=recover)

    def patch(self, name: str, body: dict[str, Any], fields: list[str]) -> dict[str, Any]:
        """Overwrite ``fields`` of policy ``name`` with ``body``'s (repeating is harmless)."""
        url = f"{self.endpoint}/v3/{name}"
        return self._call(f"updating the alert policy {body['displayName']!r}",
                          lambda: self._request("PATCH", url, json={**body, "name": name},
                                                params={"updateMask": ",".join(fields)}))


def apply_policies(policies: AlertPolicies, desired: list[dict[str, Any]]) -> list[Outcome]:
    """Create, update or leave each of ``desired``; see the module docstring."""
    existing = policies.list()
    for body in desired:  # refuse before writing anything
        same_name = [p for p in existing if p.get("displayName") == body["displayName"]]
        if same_name and not any(_is_ours(p) for p in same_name):
            raise MonitoringError(
                f"an alert policy named {body['displayName']!r} exists "
                f"({same_name[0].get('name', '?')}) without the label "
                f"{MANAGED_LABEL[0]}={MANAGED_LABEL[1]}; rename or delete it, or add the "
                "label to let gkeflow manage it")
    outcomes = []
    for body in desired:
        ours = [p for p in existing
                if p.get("displayName") == body["displayName"] and _is_ours(p)]
        if not ours:
            created = policies.create(body)
            outcomes.append(Outcome(body["displayName"], "created", created.get("name", "")))
            continue
        current = ours[0]
        fields = differing_fields(current, body)
        if not fields:
            outcomes.append(Outcome(body["displayName"], "unchanged", current["name"]))
            continue
        updated = policies.patch(current["name"], body, fields)
        outcomes.append(Outcome(body["displayName"], "updated",
                                updated.get("name", current["name"]), tuple(fields)))
    return outcomes


def planned_requests(policies: AlertPolicies,
                     desired: list[dict[str, Any]]) -> list[PlannedRequest]:
    """What `apply` sends, without sending it (no credentials needed)."""
    planned = [PlannedRequest("GET", f"{policies.collection_url}?pageSize=1000",
                              note="look-up: the policies that exist, by display name")]
    for body in desired:
        planned.append(PlannedRequest(
            "POST", policies.collection_url, body,
            note=f"only if no policy is named {body['displayName']!r}"))
        planned.append(PlannedRequest(
            "PATCH", f"{policies.endpoint}/v3/projects/{policies.project}/alertPolicies/"
                     "<id>?updateMask=<the differing fields>",
            note="instead, if gkeflow's policy of that name differs; nothing if equal"))
    return planned


def resolve_project(settings: MonitoringSettings, vertex_project: str, environment: str) -> str:
    """``monitoring.<env>.project``, else ``targets.vertex.project``."""
    project = settings.project or vertex_project
    if not project:
        raise MonitoringError(f"no project for the alert policies: set monitoring."
                              f"{environment}.project (or targets.vertex.project) in "
                              "gkeflow.yaml, or pass --project")
    return project


__all__ = ["AlertPolicies", "MonitoringError", "Outcome", "RemoteError", "apply_policies",
           "desired_policies", "differing_fields", "display_name", "planned_requests",
           "resolve_project"]
