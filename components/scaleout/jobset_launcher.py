"""Launch a training JobSet on the cluster the step runs in and follow it to its end.

The launcher is idempotent per run and task: the JobSet's name is derived from both, so a
retried launcher finds the JobSet its previous attempt created and re-attaches to it (or,
when that attempt's JobSet failed, replaces it); a model the chief already published for
this run and task is taken as is.

Following goes through the shared follower (:func:`gkeflow.components.cloud.follow.follow`)
and retry policy (:class:`gkeflow.components.cloud.retry.RetryPolicy`): the JobSet is
watched (:mod:`.jobset_remote`: a broken stream is watched again from the last version, a
410 is answered by a LIST), the chief's log is followed incrementally (:mod:`.chief_log`),
and every call that fails transiently (429, 5xx, a reset, a timeout) is retried with
backoff. The JobSet is deleted only

- on SIGTERM (the run was cancelled, or the launcher pod's deadline passed),
- after it ended (completed: its model is published; failed: its log tail is printed),
- or when the launcher finally gives up (a call kept failing for the whole retry budget,
  ``GKEFLOW_RETRY_BUDGET_S``, default 15 minutes), and then it says so in one line.

Deadlines: the JobSet carries the training deadline (the profile's ``timeout_s``, as each
Job's ``activeDeadlineSeconds``); the launcher pod's own deadline is that plus a
provisioning allowance (:func:`gkeflow.pipelines.compute.engines.gke.launcher_deadline_s`), so the
launcher never stops a JobSet that is still within its own deadline.

Permissions: the step's service account needs ``deploy/rbac/jobset-launcher.yaml``; the
workers run as their own account (``worker_service_account``, default ``gkeflow-worker``,
``deploy/rbac/jobset-worker.yaml``), which may do nothing in the cluster.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from gkeflow.components.cloud.follow import JobFailed, follow
from gkeflow.components.cloud.retry import RetryPolicy, describe_error
from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout import results, storage
from gkeflow.components.scaleout.chief_log import ChiefLog
from gkeflow.components.scaleout.jobset_remote import JobSetRemote
from gkeflow.components.scaleout.kube import KubeApi
from gkeflow.components.tracking.handoff import open_remote_training

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Longest watch window (seconds): the chief's log is looked at least this often.
POLL_S = 15.0
#: How long cleaning up an ended JobSet is retried (it holds no GPU any more).
CLEANUP_BUDGET_S = 60.0


def launch(api: KubeApi, manifest: dict, output_uri: str, *,
           policy: RetryPolicy | None = None, window_s: float = POLL_S,
           echo: Callable[[str], None] = print) -> dict:
    """Run ``manifest`` to completion; returns the chief's published summary.

    Args:
        api: The cluster's API.
        manifest: The JobSet (named, namespaced: :func:`~.jobset.finish`).
        output_uri: Where the chief publishes the model and summary.
        policy: Retries every call (default: :meth:`RetryPolicy.from_env`).
        window_s: Longest watch window; the chief's log is printed at least this often.
        echo: Where progress lines go.

    Raises:
        gkeflow.components.cloud.follow.Ending: ``JobFailed`` (the JobSet failed, was
            deleted by someone else, or published no model), ``Cancelled`` (SIGTERM; the
            JobSet was deleted), ``GaveUp`` (the line says whether the JobSet was deleted).
    """
    policy = policy or RetryPolicy.from_env()
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    remote = JobSetRemote(api, manifest, window_s, echo=echo)
    replicated = manifest["spec"]["replicatedJobs"][0]["name"]
    return run_to_publication(
        remote, ChiefLog(api, namespace, name, replicated, echo),
        lambda: storage.published_summary(output_uri), output_uri,
        ("the model of this run and task", "the chief published no model"), policy, echo)


def run_to_publication(remote: JobSetRemote, log: ChiefLog,
                       published: Callable[[], dict | None], where: str,
                       wording: tuple[str, str], policy: RetryPolicy, echo) -> dict:
    """What a launcher does with ``remote`` (a JobSet or a RayJob): nothing when what it
    publishes is there already (its summary at ``where``); else create or attach, follow
    it to its end printing ``log``, delete it once ended and return what it published.
    ``wording``: what is published, and what is said when nothing was."""
    summary = policy.call(published, f"looking for what is published at {where}",
                          on_retry=echo)
    what = f"{remote.kind} {remote.jobset}"
    if summary is not None:
        echo(f"{what}: {wording[0]} is already published at {where}; nothing to launch")
        clean_up(remote, policy, echo)
        return summary
    remote.log = log
    try:
        # a job of an earlier attempt still being deleted is waited out by watching it
        follow(remote, policy, echo=echo, stopping_poll_s=1.0)
    except JobFailed:
        log.poll(policy.call_timeout_s)  # the last lines of the log, before the error
        clean_up(remote, policy, echo)
        raise
    log.poll(policy.call_timeout_s)
    clean_up(remote, policy, echo)
    summary = policy.call(published, f"reading what is published at {where}", on_retry=echo)
    if summary is None:
        raise JobFailed(f"{what} completed but {wording[1]} at {where}; see its log above")
    return summary


def clean_up(remote: JobSetRemote, policy: RetryPolicy, echo) -> None:
    """Delete the ended resource (its pods are done); a failure is said, never raised."""
    quick = policy.with_(budget_s=min(policy.budget_s, CLEANUP_BUDGET_S))
    what = f"{remote.kind} {remote.jobset}"
    try:
        if quick.call(lambda: remote.api.delete(remote.namespace, remote.jobset,
                                                quick.call_timeout_s),
                      f"deleting the ended {what}", on_retry=echo):
            echo(f"deleted the ended {what}")
    except Exception as exc:
        echo(f"could not delete the ended {what} ({describe_error(exc)}); it holds no GPU; "
             f"delete it with: {remote.stop_hint({})}")


def output_uri(pipeline_root: str, run_id: str, task_name: str) -> str:
    """Where the chief publishes the model: under the pipeline root, per run and task."""
    if not pipeline_root.startswith("gs://"):
        raise ValueError(
            f"multi-node training on GKE moves its inputs and model through Cloud Storage; "
            f"the pipeline root is {pipeline_root or 'not set'}. Run the pipeline with a "
            "gs:// pipeline root")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{run_id}/{task_name}").strip("-")
    return f"{pipeline_root.rstrip('/')}/scaleout/{safe}/model"


def check_checkpoint_uri(checkpoint_uri: str) -> str:
    """``checkpoint_uri`` as every JobSet pod can reach it: ``gs://`` or empty.

    A directory would be a path on the pod's own disk (JobSet pods mount no shared volume),
    so the chief's checkpoints would be lost with the pod and the workers could not read them.
    """
    checkpoint_uri = checkpoint_uri.strip()
    if checkpoint_uri and not (checkpoint_uri.startswith("gs://")
                               and checkpoint_uri[5:].strip("/")):
        raise ValueError(f"checkpoint_uri {checkpoint_uri!r} is not reachable from every pod "
                         "of a multi-node GKE run; use gs://bucket/path (or leave it empty to "
                         "checkpoint under the pipeline root)")
    return checkpoint_uri


def worker_args(dataset_uri: str, schema_uri: str, output: str, params: dict,
                pipeline_root: str, run_id: str, task_name: str,
                checkpoint_uri: str = "") -> list[str]:
    import json

    args = ["--dataset", dataset_uri, "--schema", schema_uri, "--output", output,
            "--params", json.dumps(params, sort_keys=True), "--checkpoint-root", pipeline_root,
            "--run-id", run_id, "--task-name", task_name]
    if checkpoint_uri:
        args += ["--checkpoint-uri", checkpoint_uri]
    return args


def launch_in_cluster(template: dict, dataset_uri: str, schema_uri: str, params: dict,
                      pipeline_root: str, run_id: str, task_name: str, model_dir: Path,
                      api: KubeApi | None = None, namespace: str = "",
                      window_s: float | None = None, checkpoint_uri: str = "",
                      task_config=None, policy: RetryPolicy | None = None,
                      echo: Callable[[str], None] = print) -> dict:
    """The step's body: launch in the step's own namespace, install the model, return summary.

    Every pod checkpoints under ``checkpoint_uri`` when set (``gs://`` only), else under the
    pipeline root. ``task_config`` (the task's ``dsl.TaskConfig``) is merged into the pods
    where the template does not set the same thing
    (:func:`~gkeflow.components.scaleout.task_config.merge_task_config`). The workers run as
    the template's service account, never as the launcher's. With MLflow tracking, the
    pods get the step's run (:mod:`gkeflow.components.tracking.handoff`), which only the
    chief logs into; it is ended here when the JobSet has ended.
    """
    from gkeflow.components.scaleout.task_config import merge_task_config

    checkpoint_uri = check_checkpoint_uri(checkpoint_uri)
    output = output_uri(pipeline_root, run_id, task_name)  # both checked before any call
    policy = policy or RetryPolicy.from_env()

    if api is None:
        api = KubeApi(in_cluster_client())
    if not namespace:
        namespace = (SA_DIR / "namespace").read_text().strip()
    template, notes = merge_task_config(template, task_config)
    for note in notes:
        echo(f"gkeflow: {note}")
    manifest = js.finish(template, js.jobset_name(run_id, task_name), namespace, "",
                         worker_args(dataset_uri, schema_uri, output, params, pipeline_root,
                                     run_id, task_name, checkpoint_uri),
                         run_id, task_name)
    tracking = open_remote_training(f"{namespace}/{manifest['metadata']['name']}", "jobset",
                                    task_name, log=echo)
    manifest = js.with_env(manifest, tracking.kubernetes_env())
    try:
        summary = launch(api, manifest, output, policy=policy, window_s=window_s or POLL_S,
                         echo=echo)
        with tempfile.TemporaryDirectory(prefix="gkeflow-model-") as scratch:
            published = policy.call(lambda: storage.download(output, Path(scratch) / "model"),
                                    f"downloading the model from {output}", on_retry=echo)
            results.install_model(published, model_dir)
    except BaseException:
        tracking.end(succeeded=False)
        raise
    tracking.end(succeeded=True)
    return summary


def in_cluster_client():
    """An ``ApiClient`` with the pod's credentials and no retries of its own (urllib3
    would otherwise retry hidden from the retry policy, and stretch a hung read 4x)."""
    from kubernetes import client, config

    config.load_incluster_config()
    configuration = client.Configuration.get_default_copy()
    configuration.retries = False
    return client.ApiClient(configuration)


def launch_step(call_timeout_s: float = 0.0, retry_budget_s: float = 0.0,
                **arguments) -> dict:
    """:func:`launch_in_cluster` as the component runs it: any ending (failed, cancelled,
    gave up) or error becomes one line on stderr and the step's exit code, with the
    traceback only under ``GKEFLOW_DEBUG=1``.

    ``call_timeout_s`` / ``retry_budget_s``: the retry policy's (0: ``GKEFLOW_CALL_TIMEOUT_S``
    / ``GKEFLOW_RETRY_BUDGET_S`` from the environment, else the defaults, 60 s and 900 s).
    """
    from gkeflow.components.cloud.follow import run_cli

    def body():
        policy = RetryPolicy.from_env(call_timeout_s=call_timeout_s or None,
                                      budget_s=retry_budget_s or None)
        done.append(launch_in_cluster(policy=policy, **arguments))

    done: list[dict] = []
    code = run_cli(body)
    if code:
        raise SystemExit(code)
    return done[0]
