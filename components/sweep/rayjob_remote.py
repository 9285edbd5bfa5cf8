"""A sweep's RayJob as the shared follower sees it: the JobSet launcher's remote
(:class:`~gkeflow.components.scaleout.jobset_remote.JobSetRemote`: find by name, create once,
bounded watch windows re-listed after a 410, foreground delete) with KubeRay's states, the
Ray pods' service account, and the submitter's log (the driver's, as ``ray job logs
--follow`` prints it)."""

from __future__ import annotations

from gkeflow.components.cloud.follow import Phase, Status
from gkeflow.components.scaleout.jobset_remote import JobSetRemote
from gkeflow.components.scaleout.kube import KubeApi, KubeError, Resource
from gkeflow.components.sweep import rayjob as rj

RAYJOB = Resource(rj.GROUP, rj.VERSION, rj.PLURAL)


class RayJobApi(KubeApi):
    """RayJobs; the pod whose log is followed is the submitter Job's (named as the RayJob)."""

    def __init__(self, api_client):
        super().__init__(api_client, RAYJOB)

    def chief_pod(self, namespace: str, name: str, replicated_job: str,
                  timeout_s: float) -> str:
        return self.newest_pod(namespace, f"{rj.SUBMITTER_LABEL}={name}", timeout_s)


class RayJobRemote(JobSetRemote):
    """One run's sweep RayJob in one namespace."""

    kind = rj.KIND
    worker_rbac, step = "jobset-worker.yaml", "train-model"  # the same bound-to-nothing account

    def worker_account(self) -> str:
        return rj.worker_account(self.manifest)

    def create(self, timeout_s: float) -> dict:
        """Create the RayJob; refuse (deleting it) one whose stored spec lost a field this
        launcher relies on: the API server prunes fields its CRD does not know, so a
        KubeRay older than the one the body was written for accepts it silently."""
        created = super().create(timeout_s)
        lost = rj.pruned_fields(self.manifest, created)
        if lost:
            self.api.delete(self.namespace, self.jobset, timeout_s)
            raise ValueError(
                f"the cluster's RayJob CRD dropped {', '.join(lost)} (a KubeRay operator "
                f"older than {rj.MIN_KUBERAY}): upgrade KubeRay and its CRDs; the RayJob "
                f"{self.jobset} was deleted")
        return created

    def explain(self, exc: KubeError) -> None:
        if exc.status == 403:
            raise RuntimeError(
                f"the step's service account may not create RayJobs in namespace "
                f"{self.namespace} ({exc}): kubectl apply -n {self.namespace} -f "
                "deploy/rbac/rayjob-launcher.yaml, binding the account the pipeline runs "
                "as") from exc
        if exc.status == 404:
            raise RuntimeError(
                f"the cluster serves no RayJobs (ray.io/v1): install the KubeRay operator, "
                f"{rj.MIN_KUBERAY} or newer (https://docs.ray.io/en/latest/cluster/kubernetes/"
                "getting-started/kuberay-operator-installation.html), or set sweep.engine "
                "kfp") from exc
        if exc.status == 422:
            raise RuntimeError(
                f"the cluster's KubeRay refused the RayJob ({exc}); it may be older than "
                f"the {rj.MIN_KUBERAY} the suite's RayJob needs: upgrade the KubeRay operator "
                "and its CRDs") from exc

    def status(self, job: dict) -> Status:
        outcome, message = rj.state(job)
        line = rj.describe(job)
        if outcome == "Completed":
            return Status(Phase.SUCCEEDED, line)
        if outcome == "Failed":
            return Status(Phase.FAILED, line, message or "no reason given")
        if job.get("metadata", {}).get("deletionTimestamp"):
            return Status(Phase.STOPPING, f"{line}, being deleted")
        return Status(Phase.RUNNING, line)
