"""gkeflow.yaml's ``deploy:`` section (the stage itself:
:mod:`gkeflow.pipelines.definitions.deploy_stage`).

``deploy:`` in gkeflow.yaml has one entry per environment (like ``parameters:``)::

    deploy:
      prod:
        enabled: true        # the pipeline parameter deploy
        traffic: 10          # percent for the new version (canary)
        keep: 1              # previous versions kept for a rollback
        endpoint: penguins   # default: the model name
        min_replicas: 1
        max_replicas: 2
        kserve_mode: serverless   # or standard (spec.canary[])
        namespace: kubeflow-user
        storage_root: gs://my-bucket/serving

``gkeflow submit --env prod`` passes ``deploy`` and ``deploy_settings`` from it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class DeployEnvironment(BaseModel):
    """One environment's entry under ``deploy:``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    traffic: int = Field(10, ge=1, le=100)
    keep: int = Field(1, ge=0)
    endpoint: str = Field("", pattern=r"^$|^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    min_replicas: int = Field(1, ge=1)
    max_replicas: int = Field(1, ge=1)
    kserve_mode: Literal["serverless", "standard"] = "serverless"
    namespace: str = ""
    storage_root: str = Field("", pattern=r"^$|^(gs|s3)://.+")
    service_account: str = ""

    def settings_json(self) -> str:
        """The step's ``deploy_settings`` (what is not a parameter of its own)."""
        values = self.model_dump(exclude={"enabled", "traffic"})
        defaults = DeployEnvironment().model_dump(exclude={"enabled", "traffic"})
        changed = {k: v for k, v in values.items() if v != defaults[k]}
        return json.dumps(changed, sort_keys=True) if changed else ""


DeployConfig = dict[str, DeployEnvironment]


def deploy_parameters(deploy: DeployConfig, environment: str,
                      parameter_types: dict[str, Any]) -> dict[str, Any]:
    """Pipeline parameters from ``deploy.<environment>`` (none when it is not set or the
    pipeline has no deploy stage)."""
    entry = deploy.get(environment)
    if entry is None or "deploy" not in parameter_types:
        return {}
    return {"deploy": entry.enabled, "deploy_traffic": entry.traffic,
            "deploy_settings": entry.settings_json()}
