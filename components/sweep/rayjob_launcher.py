"""Launch a sweep's RayJob on the cluster the step runs in and follow it to its end.

The same guarantees as the JobSet launcher (:mod:`gkeflow.components.scaleout.jobset_launcher`),
through the same follower and retry policy: the RayJob's name is derived from the run and
task, so a retried step re-attaches to it (or replaces a failed one) and never creates a
second; a lost create answered 409 is read back; watches resume from the last version and
re-list after a 410; a transient error is retried within ``GKEFLOW_RETRY_BUDGET_S`` and never
stops the RayJob; SIGTERM deletes it (foreground: its RayCluster and pods first). The
driver's log (the submitter pod's) is printed as it grows.

Nothing is orphaned when the launcher itself is lost: the RayJob carries
``shutdownAfterJobFinishes`` (KubeRay deletes the RayCluster, and so the GPU nodes' pods,
when the Ray job ends) and the training deadline (``activeDeadlineSeconds``). A sweep whose
reports are published under the output URI is collected, not run again.

Permissions: the step's account needs ``deploy/rbac/rayjob-launcher.yaml``; the Ray pods
run as ``worker_service_account`` (``deploy/rbac/jobset-worker.yaml``, like a JobSet's
workers), which may do nothing in the cluster.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.scaleout import storage
from gkeflow.components.scaleout.chief_log import ChiefLog
from gkeflow.components.scaleout.jobset_launcher import POLL_S, SA_DIR, run_to_publication
from gkeflow.components.sweep import rayjob as rj
from gkeflow.components.sweep.ray_settings import sweep_uri
from gkeflow.components.sweep.rayjob_remote import RayJobApi, RayJobRemote


def output_uri(pipeline_root: str, run_id: str, task_name: str) -> str:
    """Where the trials publish: under the pipeline root, per run and task (``gs://``)."""
    if not pipeline_root.startswith("gs://"):
        raise ValueError(
            f"a Ray Tune sweep on GKE moves its inputs and trials' models through Cloud "
            f"Storage; the pipeline root is {pipeline_root or 'not set'}. Run the pipeline "
            "with a gs:// pipeline root")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{run_id}/{task_name}").strip("-")
    return f"{pipeline_root.rstrip('/')}/ray-sweeps/{safe}"


def driver_args(dataset_uri: str, schema_uri: str, output: str,
                trials: Sequence[Mapping[str, Any]], fixed: Mapping[str, Any],
                settings: Mapping[str, Any],
                tracking: Mapping[str, str] | None = None,
                space: Mapping[str, Any] | None = None) -> list[str]:
    for name, uri in (("dataset", dataset_uri), ("schema", schema_uri)):
        if not uri.startswith("gs://"):
            raise ValueError(f"the {name} is at {uri or 'no URI'}, which the Ray cluster's "
                             "pods cannot read: run the pipeline with a gs:// pipeline root")
    dump = lambda value: json.dumps(value, sort_keys=True)  # noqa: E731
    return ["--dataset", dataset_uri, "--schema", schema_uri, "--output", output,
            "--trials", dump(list(trials)), "--fixed", dump(dict(fixed)),
            "--settings", dump(dict(settings))] + (
                ["--tracking", dump(dict(tracking))] if tracking else []) + (
                ["--space", dump(dict(space))] if space else [])


def launch(api: RayJobApi, manifest: dict, output: str, *, policy: RetryPolicy | None = None,
           window_s: float = POLL_S, echo: Callable[[str], None] = print
           ) -> tuple[list[dict], list[str]]:
    """Run ``manifest`` (named, namespaced: :func:`~.rayjob.finish`) to its end; returns
    the trials that ran and their reports, as the driver published them under ``output``.

    Raises:
        gkeflow.components.cloud.follow.Ending: ``JobFailed`` (the RayJob failed, was
            deleted by someone else, or published no reports), ``Cancelled`` (SIGTERM; the
            RayJob was deleted), ``GaveUp`` (the line says whether it was deleted).
    """
    policy = policy or RetryPolicy.from_env()
    name = manifest["metadata"]["name"]
    remote = RayJobRemote(api, manifest, window_s, echo=echo)
    where = sweep_uri(output)
    published = run_to_publication(
        remote, ChiefLog(api, manifest["metadata"]["namespace"], name, "", echo),
        lambda: storage.published_summary(where), where,
        ("the sweep of this run and task", "its driver published no reports"), policy, echo)
    return list(published["trials"]), list(published["reports"])


def launch_in_cluster(template: dict, dataset_uri: str, schema_uri: str,
                      trials: Sequence[Mapping[str, Any]], fixed: Mapping[str, Any],
                      settings: Mapping[str, Any], pipeline_root: str, run_id: str,
                      task_name: str, api: RayJobApi | None = None, namespace: str = "",
                      window_s: float | None = None, policy: RetryPolicy | None = None,
                      tracking: Mapping[str, str] | None = None,
                      space: Mapping[str, Any] | None = None,
                      echo: Callable[[str], None] = print
                      ) -> tuple[str, list[dict], list[str]]:
    """The step's body: launch in the step's own namespace; returns the output URI, the
    trials that ran and their reports. ``space``: the search space of a bayesian search.

    Everything that can be checked is checked before any call: the pipeline root and the
    inputs are ``gs://`` (the Ray pods read nothing else), the settings are valid and a
    Bayesian search has its space.
    ``tracking`` (:func:`gkeflow.components.tracking.trials.trial_tracking`): each trial
    logs into its own MLflow run; the pods get the credentials by reference.
    """
    from gkeflow.components.sweep.ray_settings import TuneSettings

    TuneSettings(**settings).check_space(space)
    output = output_uri(pipeline_root, run_id, task_name)
    args = driver_args(dataset_uri, schema_uri, output, trials, fixed, settings, tracking,
                       space)
    policy = policy or RetryPolicy.from_env()
    if api is None:
        from gkeflow.components.scaleout.jobset_launcher import in_cluster_client

        api = RayJobApi(in_cluster_client())
    if not namespace:
        namespace = (SA_DIR / "namespace").read_text().strip()
    manifest = rj.finish(template, rj.rayjob_name(run_id, task_name), namespace, args,
                         run_id, task_name)
    if tracking:
        from gkeflow.components.tracking.trials import kubernetes_env

        manifest = rj.with_env(manifest, kubernetes_env(tracking))
    ran, reports = launch(api, manifest, output, policy=policy, window_s=window_s or POLL_S,
                          echo=echo)
    return output, ran, reports


def launch_step(call_timeout_s: float = 0.0, retry_budget_s: float = 0.0,
                **arguments) -> tuple[str, list[dict], list[str]]:
    """:func:`launch_in_cluster` as the component runs it: any ending or error becomes one
    line on stderr and the step's exit code (the traceback only under ``GKEFLOW_DEBUG=1``)."""
    from gkeflow.components.cloud.follow import run_step

    def body():
        policy = RetryPolicy.from_env(call_timeout_s=call_timeout_s or None,
                                      budget_s=retry_budget_s or None)
        return launch_in_cluster(policy=policy, **arguments)

    return run_step(body)
