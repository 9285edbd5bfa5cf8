"""``notifications:`` and ``retention:`` in gkeflow.yaml: operating scheduled pipelines.

Example::

    notifications:
      prod:                          # an environment of parameters: (or default)
        when: failure                # failure (default) | success | always
        webhook:
          format: slack              # generic | slack | google-chat
          gke_secret: gkeflow-webhook          # Kubernetes Secret (key: url) on GKE
          vertex_secret: projects/my-project/secrets/gkeflow-webhook   # Secret Manager
    schedules:
      - name: nightly
        notifications: {when: always, webhook: {format: google-chat, vertex_secret: ...}}
      - name: weekly-vertex
        notifications: {when: always, email: {recipients: [ml-team@example.com]}}
    retention:
      days: 7                        # GKE: finished runs' pods and workspaces deleted after

The webhook URL itself never appears in the file, the compiled pipeline or any output:
only the names of the secrets that hold it. Email is Vertex AI's own notification (sent on
every end of a run, to at most three addresses); Kubeflow Pipelines has none, so GKE runs
use a webhook.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gkeflow.pipelines.settings.platforms import platform

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_K8S_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SECRET_VERSION = re.compile(r"^projects/[^/]+/secrets/[A-Za-z0-9_-]+(/versions/[A-Za-z0-9_-]+)?$")


class WebhookSettings(BaseModel):
    """Where the message goes: a webhook whose URL is kept in a secret.

    Attributes:
        format: generic (JSON with every field), slack or google-chat (``{"text": ...}``).
        gke_secret: GKE: the Kubernetes Secret in the run's namespace holding the URL,
            ``NAME`` (key ``url``) or ``NAME/KEY``.
        vertex_secret: Vertex AI: the Secret Manager secret holding the URL,
            ``projects/P/secrets/S`` (latest version) or ``.../versions/V``; the runs'
            service account needs roles/secretmanager.secretAccessor on it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["generic", "slack", "google-chat"] = "generic"
    gke_secret: str = ""
    vertex_secret: str = ""

    @field_validator("gke_secret", "vertex_secret")
    @classmethod
    def _not_a_url(cls, value: str) -> str:
        if "://" in value:
            raise ValueError("name the secret that holds the webhook URL, never the URL itself")
        return value.strip()

    @field_validator("gke_secret")
    @classmethod
    def _k8s_secret(cls, value: str) -> str:
        name, _, key = value.partition("/")
        if value and (not _K8S_NAME.match(name) or (key and not _K8S_KEY.match(key))):
            raise ValueError("not a Kubernetes Secret NAME or NAME/KEY")
        return value

    @field_validator("vertex_secret")
    @classmethod
    def _secret_manager(cls, value: str) -> str:
        if value and not _SECRET_VERSION.match(value):
            raise ValueError("not projects/PROJECT/secrets/SECRET"
                             "[/versions/VERSION]")
        return value

    def secret_for(self, target: str) -> str:
        """The secret of ``target``; raises ValueError naming the missing key."""
        where = platform(target)
        secret = (self.gke_secret if where.kubernetes else
                  self.vertex_secret if where.managed else "")
        if where.cloud and not secret:
            raise ValueError(f"notifications for target {target}: set webhook."
                             f"{target}_secret (the secret holding the webhook URL)")
        return secret


_EMAIL = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+$")


class EmailSettings(BaseModel):
    """Vertex AI Pipelines' email notification.

    Attributes:
        recipients: One to three addresses; Vertex AI sends them the run's final state and
            a link when the run ends, whatever the state.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    recipients: list[str] = Field(min_length=1)

    @field_validator("recipients")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        from gkeflow.components.notify.email import MAX_RECIPIENTS

        value = [address.strip() for address in value]
        bad = [str(i) for i, address in enumerate(value, 1) if not _EMAIL.match(address)]
        if bad:
            raise ValueError(f"not an email address: entry {', '.join(bad)} (NAME@DOMAIN)")
        if len(value) > MAX_RECIPIENTS:
            raise ValueError(f"Vertex AI emails at most {MAX_RECIPIENTS} addresses, not "
                             f"{len(value)}; use a mailing list's address")
        return value


class NotificationSettings(BaseModel):
    """When to notify and where (one environment's, or one schedule's own): a webhook,
    or (Vertex AI only) email."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: Literal["failure", "success", "always"] = "failure"
    webhook: WebhookSettings | None = None
    email: EmailSettings | None = None

    @model_validator(mode="after")
    def _one_channel(self):
        if (self.webhook is None) == (self.email is None):
            raise ValueError("give one channel: webhook (GKE and Vertex AI) or email (Vertex "
                             "AI); a run ends in one notification step")
        if self.email is not None and self.when != "always":
            raise ValueError("Vertex AI emails on every end of a run (succeeded, failed or "
                             "cancelled): set when: always, or use a webhook to hear of "
                             f"{self.when} only")
        return self

    def check_target(self, target: str) -> None:
        """Raises ValueError when ``target`` cannot send this notification."""
        if self.email is not None and platform(target).kubernetes:
            raise ValueError("notifications.email: Kubeflow Pipelines on GKE sends no email; "
                             "give GKE runs a webhook (an environment or a schedule of "
                             "their own)")
        if self.webhook is not None:
            self.webhook.secret_for(target)


class RetentionSettings(BaseModel):
    """How long finished runs keep their resources.

    Attributes:
        days: GKE: KFP deletes a finished run's workflow, pods and workspace this many days
            after it ends (PipelineConfig time-to-live; KFP backend 2.17 or later). Unset:
            the cluster's own setting (docs/operating.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    days: int | None = Field(None, ge=1, le=24855)  # int32 seconds


def check_environments(config):
    """Every ``notifications.<environment>`` names an environment of ``parameters:``."""
    for environment in config.notifications:
        if environment != "default" and environment not in config.parameters:
            from gkeflow.components.did_you_mean import did_you_mean

            known = ", ".join(config.parameters) or "none"
            hint = did_you_mean(environment, ["default", *config.parameters])
            raise ValueError(f"notifications.{environment}: no such environment under "
                             f"parameters{hint} (environments: {known})")
    return config
