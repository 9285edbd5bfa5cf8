"""Launch a training JobSet on the cluster the step runs in, follow it, and clean it up.

The launcher is idempotent per run and task: the JobSet's name is derived from both, so a
retried launcher finds the JobSet its previous attempt created and re-attaches to it (or,
when that attempt's JobSet failed, replaces it); a model the chief already published for
this run and task is taken as is. The chief's log is streamed into the step's log, the
step fails when the JobSet fails, and the JobSet is deleted when the step ends, fails or is
cancelled (SIGTERM).

The JobSet is followed with the Kubernetes watch API, not by polling it: one read gives
its state and ``resourceVersion``, then a watch (``?watch=true&resourceVersion=...``,
bounded by ``timeoutSeconds``) streams its changes. When a watch ends (its timeout, or the
server closing it) the launcher watches again from the last version it saw; when that
version is too old (410 Gone, as an HTTP status or an ``ERROR`` event) it reads the JobSet
again and watches from there. Between watch events, and at least once per watch window,
it prints what is new in the chief's log.

Permissions the step's service account needs: ``deploy/rbac/jobset-launcher.yaml``.
"""

from __future__ import annotations

import math
import re
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout import results, storage

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
REQUEST_TIMEOUT_S = 30
#: Longest watch window (seconds): the chief's log is looked at least this often.
POLL_S = 10.0
HTTP_GONE = 410


class JobSetFailed(RuntimeError):
    """The JobSet failed; the message carries its reason and the end of the chief's log."""


class Cancelled(RuntimeError):
    """The step was cancelled (SIGTERM) while the JobSet ran; the JobSet was deleted."""


class KubeApi:
    """The few Kubernetes calls the launcher makes, through the ``kubernetes`` client."""

    def __init__(self, api_client):
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    @staticmethod
    def _status(exc) -> int:
        return getattr(exc, "status", 0) or 0

    def get(self, namespace: str, name: str) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                js.GROUP, js.VERSION, namespace, js.PLURAL, name,
                _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if self._status(exc) == 404:
                return None
            raise

    def create(self, namespace: str, body: dict) -> bool:
        """Create ``body``; False when a JobSet of that name exists already."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.create_namespaced_custom_object(
                js.GROUP, js.VERSION, namespace, js.PLURAL, body,
                _request_timeout=REQUEST_TIMEOUT_S)
            return True
        except ApiException as exc:
            if self._status(exc) == 409:
                return False
            raise

    def delete(self, namespace: str, name: str) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(
                js.GROUP, js.VERSION, namespace, js.PLURAL, name,
                propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT_S)
            return True
        except ApiException as exc:
            if self._status(exc) == 404:
                return False
            raise

    def watch(self, namespace: str, name: str, resource_version: str, timeout_s: int):
        """Changes of JobSet ``name`` after ``resource_version``, for at most ``timeout_s``.

        Yields ``(event type, object dict)``; ends when the server ends the stream.

        Raises:
            ApiException: status 410 when ``resource_version`` is too old (re-read, then
                watch from the version read).
        """
        from kubernetes import watch

        events = watch.Watch(return_type="object").stream(
            self.custom.list_namespaced_custom_object, js.GROUP, js.VERSION, namespace,
            js.PLURAL, field_selector=f"metadata.name={name}",
            resource_version=resource_version, allow_watch_bookmarks=True,
            timeout_seconds=timeout_s, _request_timeout=(REQUEST_TIMEOUT_S,
                                                         timeout_s + REQUEST_TIMEOUT_S))
        for event in events:
            yield event["type"], event["raw_object"]

    def chief_pods(self, namespace: str, name: str) -> list[str]:
        """Pods of worker 0 (the chief), oldest first."""
        pods = self.core.list_namespaced_pod(
            namespace, label_selector=f"{js.NAME_LABEL}={name},{js.INDEX_LABEL}=0",
            _request_timeout=REQUEST_TIMEOUT_S)
        items = sorted(pods.items, key=lambda p: (str(p.metadata.creation_timestamp or ""),
                                                  p.metadata.name))
        return [p.metadata.name for p in items]

    def log(self, namespace: str, pod: str) -> str:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.core.read_namespaced_pod_log(
                pod, namespace, _request_timeout=REQUEST_TIMEOUT_S) or ""
        except ApiException as exc:
            if self._status(exc) in (400, 404):  # not started yet, or gone
                return ""
            raise

    def pod_service_account(self, namespace: str, pod: str) -> str:
        found = self.core.read_namespaced_pod(pod, namespace, _request_timeout=REQUEST_TIMEOUT_S)
        return found.spec.service_account_name or ""


class _LogFollower:
    """Prints what is new in the chief's log since the last look."""

    def __init__(self, api: KubeApi, namespace: str, name: str, echo: Callable[[str], None]):
        self.api, self.namespace, self.name, self.echo = api, namespace, name, echo
        self.printed: dict[str, int] = {}
        self.last = ""

    def poll(self) -> None:
        for pod in self.api.chief_pods(self.namespace, self.name):
            text = self.api.log(self.namespace, pod)
            seen = self.printed.get(pod, 0)
            if len(text) > seen:
                for line in text[seen:].splitlines():
                    self.echo(f"[{pod}] {line}")
                self.printed[pod] = len(text)
            if text:
                self.last = text

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.last.splitlines()[-lines:])


def _wait_gone(api: KubeApi, namespace: str, name: str, poll_s: float, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while api.get(namespace, name) is not None:
        if time.monotonic() > deadline:
            raise JobSetFailed(f"JobSet {name} was not deleted within {limit_s:.0f}s; delete "
                               f"it (kubectl delete jobset -n {namespace} {name}) and retry")
        time.sleep(poll_s)


def launch(api: KubeApi, manifest: dict, output_uri: str, poll_s: float = 5.0,
           echo: Callable[[str], None] = print, delete_wait_s: float = 300.0) -> dict:
    """Run ``manifest`` to completion; returns the chief's published summary.

    ``poll_s`` bounds each watch window (rounded up to whole seconds, at least 1: the chief's
    log is printed at least that often) and spaces the looks for a replaced JobSet's deletion.

    Raises:
        JobSetFailed: the JobSet failed (or finished without a published model).
        Cancelled: SIGTERM arrived; the JobSet has been deleted.
    """
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    summary = storage.published_summary(output_uri)
    if summary is not None:
        echo(f"JobSet {name}: the model of this run and task is already published at "
             f"{output_uri}; nothing to launch")
        api.delete(namespace, name)
        return summary

    def on_sigterm(signum, frame):
        raise Cancelled(f"cancelled; JobSet {name} deleted")

    # Handle SIGTERM before creating anything, so a cancel never leaves a JobSet behind.
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    follower = _LogFollower(api, namespace, name, echo)
    try:
        existing = api.get(namespace, name)
        if existing is not None and js.state(existing)[0] == "Failed":
            echo(f"JobSet {name} from an earlier attempt failed; replacing it")
            api.delete(namespace, name)
            _wait_gone(api, namespace, name, poll_s, delete_wait_s)
            existing = None
        if existing is not None or not api.create(namespace, manifest):
            echo(f"re-attaching to JobSet {name} in {namespace} (created by an earlier "
                 "attempt)")
        else:
            echo(f"created JobSet {name} in {namespace}: {js.replicas_of(manifest)} workers")
        _follow(api, namespace, name, follower, echo, max(1, math.ceil(poll_s)))
        summary = storage.published_summary(output_uri)
        if summary is None:
            raise JobSetFailed(f"JobSet {name} completed but the chief published no model at "
                               f"{output_uri}")
        return summary
    finally:
        signal.signal(signal.SIGTERM, previous)
        if api.delete(namespace, name):
            echo(f"deleted JobSet {name}")


def _follow(api: KubeApi, namespace: str, name: str, follower: _LogFollower,
            echo: Callable[[str], None], window_s: int) -> None:
    """Until the JobSet completes: read it once, then watch it (see the module docstring).

    Raises:
        JobSetFailed: it failed, or was deleted by someone else.
    """
    from kubernetes.client.exceptions import ApiException

    last_line = ""

    def seen(current: dict | None) -> bool:
        """Report ``current``; True once it has completed."""
        nonlocal last_line
        if current is None:
            raise JobSetFailed(f"JobSet {name} disappeared while running (deleted by "
                               "someone else?)")
        line = js.describe(current)
        if line != last_line:
            echo(line)
            last_line = line
        follower.poll()
        outcome, message = js.state(current)
        if outcome == "Failed":
            raise JobSetFailed(f"JobSet {name} failed: {message or 'no reason given'}\n"
                               f"chief log (last lines):\n{follower.tail()}")
        return outcome == "Completed"

    version = ""
    while True:
        if not version:  # (re)read: the state now, and the version to watch from
            current = api.get(namespace, name)
            if seen(current):
                return
            version = current["metadata"].get("resourceVersion", "")
        try:
            for kind, obj in api.watch(namespace, name, version, window_s):
                version = obj.get("metadata", {}).get("resourceVersion") or version
                if kind == "BOOKMARK":
                    continue
                if seen(None if kind == "DELETED" else obj):
                    return
        except ApiException as exc:
            if getattr(exc, "status", 0) != HTTP_GONE:
                raise
            echo(f"JobSet {name}: watch expired (410 Gone); reading it again")
            version = ""
            continue
        follower.poll()  # the window ended: print the chief's log, then watch again


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
                      api: KubeApi | None = None, namespace: str = "", pod_name: str = "",
                      poll_s: float | None = None, checkpoint_uri: str = "",
                      task_config=None) -> dict:
    """The step's body: launch in the step's own namespace, install the model, return summary.

    Every pod checkpoints under ``checkpoint_uri`` when set (``gs://`` only), else under the
    pipeline root. ``task_config`` (the task's ``dsl.TaskConfig``) is merged into the pods
    where the template does not set the same thing
    (:func:`~gkeflow.components.scaleout.task_config.merge_task_config`).
    """
    import os

    from gkeflow.components.scaleout.task_config import merge_task_config

    checkpoint_uri = check_checkpoint_uri(checkpoint_uri)
    output = output_uri(pipeline_root, run_id, task_name)  # both checked before any call

    if api is None:
        from kubernetes import client, config

        config.load_incluster_config()
        api = KubeApi(client.ApiClient())
    if not namespace:
        namespace = (SA_DIR / "namespace").read_text().strip()
    pod_name = pod_name or os.environ.get("HOSTNAME", "")
    service_account = api.pod_service_account(namespace, pod_name) if pod_name else ""
    template, notes = merge_task_config(template, task_config)
    for note in notes:
        print(f"gkeflow: {note}")
    manifest = js.finish(template, js.jobset_name(run_id, task_name), namespace,
                         service_account,
                         worker_args(dataset_uri, schema_uri, output, params, pipeline_root,
                                     run_id, task_name, checkpoint_uri),
                         run_id, task_name)
    summary = launch(api, manifest, output, poll_s=poll_s or POLL_S)
    with tempfile.TemporaryDirectory(prefix="gkeflow-model-") as scratch:
        published = storage.download(output, Path(scratch) / "model")
        results.install_model(published, model_dir)
    return summary
