"""A training JobSet as the shared follower sees it
(a :class:`~gkeflow.components.cloud.follow.Remote`).

- **find**: GET by its deterministic name (run and task), so a retried step re-attaches.
- **create**: POST, once the workers' service account is known to exist; a 409 means an
  earlier create of this step made it: read it back.
- **next**: one bounded watch window (``?watch=true&resourceVersion=...&timeoutSeconds=``),
  as client-go's reflector does it:

  - the window ends, or the stream ends or breaks (``ProtocolError``, a reset, a read that
    hangs): watch again from the last ``resourceVersion`` seen — a broken stream raises,
    so the retry policy backs off first;
  - 410 Gone (HTTP status or ``ERROR`` event): the version is too old; after a backoff,
    LIST with ``fieldSelector=metadata.name=<name>`` and watch from the *list's* version (a
    GET of an unchanged JobSet would return the same old version and 410 again); 410s in a
    row back off exponentially, within the retry policy's budget;
  - an ``ADDED``/``MODIFIED`` event returns the JobSet as it now is; ``DELETED``: None.

  After each window the chief's log is looked at (:class:`~.chief_log.ChiefLog`).
- **stop**: DELETE (foreground: its Jobs and pods go first); **clear**: delete a failed
  predecessor and watch until it is gone, so the replacement's pods never meet the old ones.

Every call is one request; the follower retries what is transient and never stops the
JobSet for a transient error.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gkeflow.components.cloud.follow import Phase, Status
from gkeflow.components.cloud.retry import describe_error, is_transient
from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout.kube import KubeError, WatchExpired


class JobSetRemote:
    """One run's training JobSet in one namespace."""

    kind = "JobSet"

    def __init__(self, api, manifest: dict, window_s: float, log=None,
                 delete_wait_s: float = 600.0, echo: Callable[[str], None] = print):
        self.api, self.manifest, self.log, self.echo = api, manifest, log, echo
        self.account_checked = False
        self.namespace = manifest["metadata"]["namespace"]
        self.jobset = manifest["metadata"]["name"]
        self.window_s = max(1, math.ceil(window_s))
        self.delete_wait_s = delete_wait_s
        self.version = ""     # where the next watch starts
        self.relist = False   # the last watch was answered 410: LIST first

    def _seen(self, job: dict | None) -> dict | None:
        if job is not None:
            self.version = job.get("metadata", {}).get("resourceVersion", "") or self.version
        return job

    # -- the Remote protocol ------------------------------------------------------------------
    def find(self, timeout_s: float) -> dict | None:
        return self._seen(self.api.get(self.namespace, self.jobset, timeout_s))

    def create(self, timeout_s: float) -> dict:
        if not self.account_checked:
            self._check_worker_account(timeout_s)
            self.account_checked = True
        try:
            created = self.api.create(self.namespace, self.manifest, timeout_s)
        except KubeError as exc:
            self.explain(exc)
            raise
        if created is None:  # 409: a create of this step whose answer was lost made it
            created = self.api.get(self.namespace, self.jobset, timeout_s)
            if created is None:
                raise ConnectionError(f"{self.kind} {self.jobset} already existed, then was "
                                      "gone")
        return self._seen(created)

    def _check_worker_account(self, timeout_s: float) -> None:
        """Refuse to create the JobSet when the workers' service account is missing: the
        Job controller would retry creating its pods forever, with no error here."""
        account = self.worker_account()
        if not account:
            return
        try:
            exists = self.api.service_account_exists(self.namespace, account, timeout_s)
        except Exception as exc:
            if is_transient(exc):
                raise
            # e.g. a 403 under an older RBAC manifest: not a reason to stop
            self.echo(f"could not check the workers' service account {account} "
                      f"({describe_error(exc)}); launching anyway")
            return
        if not exists:
            raise ValueError(
                f"the workers' service account {account} does not exist in namespace "
                f"{self.namespace}: create it (kubectl apply -n {self.namespace} -f "
                f"deploy/rbac/{self.worker_rbac}) or set "
                f"compute.{self.step}.worker_service_account")

    #: What the workers' account is made from, and the step whose compute names it.
    worker_rbac, step = "jobset-worker.yaml", "train-model"

    def worker_account(self) -> str:
        pod = self.manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        return pod["spec"].get("serviceAccountName", "")

    def explain(self, exc: KubeError) -> None:
        _explain(exc, self.namespace)

    def status(self, job: dict) -> Status:
        outcome, message = js.state(job)
        line = js.describe(job)
        if outcome == "Completed":
            return Status(Phase.SUCCEEDED, line)
        if outcome == "Failed":
            return Status(Phase.FAILED, line, message or "no reason given")
        if job.get("metadata", {}).get("deletionTimestamp"):
            return Status(Phase.STOPPING, f"{line}, being deleted")
        return Status(Phase.RUNNING, line)

    def identity(self, job: dict) -> str:
        metadata = job.get("metadata", {})
        return metadata.get("uid") or f"{metadata.get('name')}@{metadata.get('creationTimestamp')}"

    def name(self, job: dict) -> str:
        return job.get("metadata", {}).get("name", self.jobset)

    def next(self, job: dict, timeout_s: float) -> dict | None:
        current: dict | None = job
        if self.relist:
            listed, self.version = self.api.list_one(self.namespace, self.jobset, timeout_s)
            self.relist = False
            if listed is None or _version(listed) != _version(job):
                return listed  # it changed (or is gone) meanwhile: report that first
        version = self.version or _version(job)
        try:
            for kind, obj in self.api.watch(self.namespace, self.jobset, version,
                                            self.window_s, timeout_s):
                self.version = obj.get("metadata", {}).get("resourceVersion") or self.version
                if kind == "BOOKMARK":
                    continue
                current = None if kind == "DELETED" else obj
                break
        except WatchExpired:
            self.relist = True
            raise
        if self.log is not None:
            self.log.poll(timeout_s)
        return current

    def stop(self, job: dict, timeout_s: float) -> None:
        self.api.delete(self.namespace, self.jobset, timeout_s)

    def clear(self, job: dict, timeout_s: float) -> None:
        """Delete the ended JobSet of an earlier attempt and watch until it is gone (with
        foreground deletion, its Jobs and pods go first)."""
        import time

        self.api.delete(self.namespace, self.jobset, timeout_s)
        deadline = time.monotonic() + self.delete_wait_s
        while True:
            current, version = self.api.list_one(self.namespace, self.jobset, timeout_s)
            if current is None:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.kind} {self.jobset} of an earlier attempt was not deleted within "
                    f"{self.delete_wait_s:.0f}s; look at its finalizers (kubectl describe "
                    f"{self.kind.lower()} -n {self.namespace} {self.jobset}), delete it, "
                    "and retry")
            for kind, _ in self.api.watch(self.namespace, self.jobset, version,
                                          self.window_s, timeout_s):
                if kind == "DELETED":
                    break
        self.version = ""

    def stop_hint(self, job: dict) -> str:
        return f"kubectl delete {self.kind.lower()} -n {self.namespace} {self.jobset}"


def _version(job: dict) -> str:
    return job.get("metadata", {}).get("resourceVersion", "")


def _explain(exc: KubeError, namespace: str) -> None:
    """Raise what to do instead of a refused create, when the refusal says it."""
    if exc.status == 403:
        raise RuntimeError(
            f"the step's service account may not create JobSets in namespace {namespace} "
            f"({exc}): kubectl apply -n {namespace} -f deploy/rbac/jobset-launcher.yaml, "
            "binding the account the pipeline runs as") from exc
    if exc.status == 404:
        raise RuntimeError(
            "the cluster serves no JobSets (jobset.x-k8s.io/v1alpha2): install the JobSet "
            "controller (https://jobset.sigs.k8s.io/docs/installation/)") from exc
