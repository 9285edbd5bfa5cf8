"""RayJobs for :class:`tests.integration.fake_kube.FakeKube` (``workload=RayJobWorkload()``),
as the API server and KubeRay v1.7.0 serve them.

- **Admission**: the body is validated against the vendored CRD
  (``tests/contracts/ray.io_rayjobs.yaml``, ``ray.io/v1``) with unknown fields rejected,
  as the API server's structural schema would prune them; a failure is a 422.
- **The operator's own validation** (``ValidateRayJobMetadata`` / ``ValidateRayJobSpec`` in
  ``ray-operator/controllers/ray/utils/validation.go``): a RayJob it refuses is accepted by
  the API server and then set to ``jobDeploymentStatus: ValidationFailed``.
- **Pods**: the head, one per worker replica, and the submitter Job's pod (labelled
  ``batch.kubernetes.io/job-name=<rayjob>``), whose log is the driver's.
- **States**: ``Initializing`` (cluster not ready), ``Running`` with the Ray job
  ``RUNNING``, then ``Complete``/``SUCCEEDED`` or ``Failed``/``FAILED`` with reason
  ``AppFailed`` (``rayjob_controller.go``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import jsonschema
import yaml

from tests.integration.fake_kube import _closed

CRD = Path(__file__).resolve().parents[1] / "contracts" / "ray.io_rayjobs.yaml"
#: ``MaxRayJobNameLength`` (utils/constant.go).
MAX_NAME = 47
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@functools.cache
def _validator() -> jsonschema.Draft7Validator:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(CRD.read_text(), Loader=loader)  # noqa: S506 (a safe loader)
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(_closed(version["schema"]["openAPIV3Schema"]))


def validate_rayjob(manifest: dict) -> None:
    """Raise ``jsonschema.ValidationError`` (or ``AssertionError``) unless ``manifest`` is
    a RayJob the API server admits; then :func:`operator_refusal` must be empty too."""
    _validator().validate(manifest)
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayJob"


def operator_refusal(manifest: dict) -> str:
    """What KubeRay's validation says of ``manifest``; "" when it accepts it."""
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    if len(name) > MAX_NAME:
        return f"RayJob name should be no more than {MAX_NAME} characters"
    if not _DNS1035.fullmatch(name):
        return "RayJob name should be a valid DNS1035 label"
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        return "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"
    if spec.get("ttlSecondsAfterFinished", 0) < 0:
        return "TTLSecondsAfterFinished must be a non-negative integer"
    cluster = spec.get("rayClusterSpec")
    if cluster is None and not spec.get("clusterSelector"):
        return "one of RayClusterSpec or ClusterSelector must be set"
    if cluster is not None:
        if not cluster["headGroupSpec"]["template"].get("spec", {}).get("containers"):
            return "headGroupSpec should have at least one container"
        for group in cluster.get("workerGroupSpecs") or []:
            if not group["template"].get("spec", {}).get("containers"):
                return "workerGroupSpec should have at least one container"
            low, high = group.get("minReplicas"), group.get("maxReplicas")
            if low is None or high is None:
                return (f"worker group {group['groupName']} must set both minReplicas and "
                        "maxReplicas when autoscaling is disabled")
            if low > high:
                return f"worker group {group['groupName']} has minReplicas greater than maxReplicas"
    if spec.get("activeDeadlineSeconds") is not None and spec["activeDeadlineSeconds"] <= 0:
        return "activeDeadlineSeconds must be a positive integer"
    if spec.get("backoffLimit") is not None and spec["backoffLimit"] < 0:
        return "backoffLimit must be a positive integer"
    return ""


class RayJobWorkload:
    """``pruned``: ``spec`` fields the served CRD does not know (an older KubeRay): the
    API server accepts the body and stores it without them, saying nothing."""

    group, version, plural, kind = "ray.io", "v1", "rayjobs", "RayJob"

    def __init__(self, pruned: tuple[str, ...] = ()):
        self.pruned = pruned

    def admit(self, manifest: dict) -> dict:
        for name in self.pruned:
            manifest["spec"].pop(name, None)
        return manifest

    def prepare(self) -> None:
        _validator()

    def validate(self, manifest: dict) -> None:
        validate_rayjob(manifest)

    def refusal(self, manifest: dict) -> str:
        return operator_refusal(manifest)

    def pods(self, manifest: dict):
        name = manifest["metadata"]["name"]
        cluster = manifest["spec"]["rayClusterSpec"]
        head = cluster["headGroupSpec"]["template"]["spec"]
        yield (f"{name}-raycluster-head-abcde", {"ray.io/cluster": f"{name}-raycluster",
                                                 "ray.io/node-type": "head"},
               head.get("serviceAccountName", "default"), "ray head started")
        for group in cluster.get("workerGroupSpecs") or []:
            for index in range(int(group.get("replicas", 0))):
                yield (f"{name}-raycluster-{group['groupName']}-worker-{index}",
                       {"ray.io/cluster": f"{name}-raycluster", "ray.io/node-type": "worker",
                        "ray.io/group": group["groupName"]},
                       group["template"]["spec"].get("serviceAccountName", "default"),
                       f"ray worker {index} started")
        # the submitter Job's pod: KubeRay's own account, not the Ray pods'
        yield (f"{name}-submitter", {"batch.kubernetes.io/job-name": name,
                                     "ray.io/originated-from-cr-name": name},
               "default", "submitting the Ray job")

    def ended(self, manifest: dict) -> bool:
        return manifest["status"].get("jobDeploymentStatus") in (
            "Complete", "Failed", "ValidationFailed")

    def state(self, manifest: dict) -> str:
        return manifest["status"].get("jobDeploymentStatus") or "New"

    def running(self, manifest: dict, ready: bool) -> None:
        workers = sum(int(g.get("replicas", 0)) for g in
                      manifest["spec"]["rayClusterSpec"].get("workerGroupSpecs") or [])
        manifest["status"].update({
            "jobDeploymentStatus": "Running" if ready else "Initializing",
            "rayClusterName": f"{manifest['metadata']['name']}-raycluster",
            "rayClusterStatus": {"desiredWorkerReplicas": workers,
                                 "availableWorkerReplicas": workers if ready else 0}})
        if ready:
            manifest["status"]["jobStatus"] = "RUNNING"

    def end(self, manifest: dict, outcome: str, message: str) -> None:
        status = manifest["status"]
        if outcome == "Invalid":
            status.update(jobDeploymentStatus="ValidationFailed", reason="ValidationFailed",
                          message=f"The RayJob spec is invalid: {message}")
        elif outcome == "Completed":
            status.update(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED",
                          message=message or "Job finished successfully.")
        elif outcome == "Stopped":
            status.update(jobDeploymentStatus="Complete", jobStatus="STOPPED",
                          message=message or "Job was intentionally stopped.")
        else:
            status.update(jobDeploymentStatus="Failed", jobStatus="FAILED", reason="AppFailed",
                          message=message or "Job entrypoint command failed with exit code 1")
