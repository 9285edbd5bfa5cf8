"""The Kubernetes calls the launchers make, one HTTP request each, no retries.

:class:`KubeApi` reads and writes one kind of custom resource (:class:`Resource`: JobSets
by default; the sweep's RayJobs through a subclass), the pod whose log is followed, and
that log.

Retries, backoff and budgets belong to the caller
(:class:`~gkeflow.components.cloud.retry.RetryPolicy`, through
:mod:`gkeflow.components.scaleout.jobset_remote`); every method here makes exactly one
request bounded by ``timeout_s`` and lets the client's error through, so the caller sees
what happened (a 503, a reset connection, a read that timed out, a stream cut short).

Calls go through the ``kubernetes`` client's ``ApiClient`` (in-cluster credentials and
TLS); the watch stream and the log are read raw (``_preload_content=False``), line by line,
so a stream that breaks raises ``urllib3`` errors instead of ending quietly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from gkeflow.components.scaleout import jobset as js

HTTP_GONE = 410


@dataclass(frozen=True)
class Resource:
    """A namespaced custom resource's API: ``/apis/<group>/<version>/namespaces/*/<plural>``."""

    group: str
    version: str
    plural: str


JOBSET = Resource(js.GROUP, js.VERSION, js.PLURAL)


class BrokenStream(ConnectionError):
    """A watch stream ended in the middle of an event, or carried one that is not JSON:
    transient, watched again from the last version."""


class WatchExpired(ConnectionError):
    """The watch's ``resourceVersion`` is too old (410 Gone): LIST, then watch from the
    list's version. A ``ConnectionError``: transient, retried with backoff."""


class KubeError(RuntimeError):
    """An answer of the API server other than success: its status and its message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _timeout(seconds: float) -> tuple[float, float]:
    """``(connect, read)`` timeouts: the ``kubernetes`` client silently ignores a single
    timeout that is not an ``int`` (a float such as 0.5 or 60.0 would mean no timeout)."""
    return (float(seconds), float(seconds))


def _status(exc) -> int:
    return getattr(exc, "status", 0) or 0


def _error(exc) -> BaseException:
    """A ``kubernetes`` ``ApiException`` as :class:`KubeError` carrying the server's own
    message (``Status.message``); one without an answer (status 0) unchanged."""
    status = _status(exc)
    if not status:
        return exc
    try:
        message = json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        message = getattr(exc, "reason", "") or str(status)
    return KubeError(status, f"{message}")


def _answered(method):
    """Turn the client's ``ApiException`` into :class:`KubeError` (see :func:`_error`)."""
    import functools

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        from kubernetes.client.exceptions import ApiException

        try:
            result = method(*args, **kwargs)
        except ApiException as exc:
            raise _error(exc) from exc
        if hasattr(result, "__next__"):
            return _answered_stream(result)
        return result

    return wrapper


def _answered_stream(events):
    from kubernetes.client.exceptions import ApiException

    try:
        yield from events
    except ApiException as exc:
        raise _error(exc) from exc


class KubeApi:
    """One kind of custom resource (JobSets unless told), the chief's pod and its log."""

    def __init__(self, api_client, resource: Resource = JOBSET):
        from kubernetes import client

        self.resource = resource
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def _where(self, namespace: str) -> tuple[str, str, str, str]:
        r = self.resource
        return r.group, r.version, namespace, r.plural

    # -- the custom resource ---------------------------------------------------------------
    @_answered
    def get(self, namespace: str, name: str, timeout_s: float) -> dict | None:
        """The JobSet, or None when there is none (404)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                *self._where(namespace), name,
                _request_timeout=_timeout(timeout_s))
        except ApiException as exc:
            if _status(exc) == 404:
                return None
            raise

    @_answered
    def list_one(self, namespace: str, name: str, timeout_s: float) -> tuple[dict | None, str]:
        """LIST with ``fieldSelector=metadata.name=<name>``: the JobSet (or None) and the
        list's ``resourceVersion``, the point a watch resumes from after a 410."""
        found = self.custom.list_namespaced_custom_object(
            *self._where(namespace), field_selector=f"metadata.name={name}",
            _request_timeout=_timeout(timeout_s))
        items = found.get("items") or []
        return (items[0] if items else None), found["metadata"]["resourceVersion"]

    @_answered
    def create(self, namespace: str, body: dict, timeout_s: float) -> dict | None:
        """The created JobSet; None when one of that name exists already (409)."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.create_namespaced_custom_object(
                *self._where(namespace), body,
                _request_timeout=_timeout(timeout_s))
        except ApiException as exc:
            if _status(exc) == 409:
                return None
            raise

    @_answered
    def delete(self, namespace: str, name: str, timeout_s: float) -> bool:
        """Delete the JobSet and, before it disappears, its Jobs and pods (foreground);
        False when it was already gone."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_namespaced_custom_object(
                *self._where(namespace), name,
                propagation_policy="Foreground", _request_timeout=_timeout(timeout_s))
            return True
        except ApiException as exc:
            if _status(exc) == 404:
                return False
            raise

    @_answered
    def watch(self, namespace: str, name: str, resource_version: str, window_s: int,
              timeout_s: float) -> Iterator[tuple[str, dict]]:
        """Events of JobSet ``name`` after ``resource_version``, for ``window_s`` seconds.

        Yields ``(type, object)``; ends when the server ends the stream.

        Raises:
            WatchExpired: 410 Gone, as the HTTP status or as an ``ERROR`` event.
            urllib3.exceptions.ProtocolError, ReadTimeoutError...: the stream broke or hung
                (no byte for ``window_s + timeout_s`` seconds).
        """
        from kubernetes.client.exceptions import ApiException

        try:
            response = self.custom.list_namespaced_custom_object(
                *self._where(namespace),
                field_selector=f"metadata.name={name}", resource_version=resource_version,
                allow_watch_bookmarks=True, watch=True, timeout_seconds=window_s,
                _preload_content=False, _request_timeout=(timeout_s, window_s + timeout_s))
        except ApiException as exc:
            if _status(exc) == HTTP_GONE:
                raise WatchExpired(f"watch from resourceVersion {resource_version}: "
                                   "410 Gone") from exc
            raise
        try:
            for line in _lines(response):
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise BrokenStream(f"watch stream carried a broken event: {exc}") from exc
                kind, obj = event.get("type", ""), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == HTTP_GONE:
                        raise WatchExpired(f"watch from resourceVersion {resource_version}: "
                                           f"{obj.get('message') or '410 Gone'}")
                    # e.g. 500 or 429 as an event: transient by its code, like a status
                    raise KubeError(int(obj.get("code") or 500),
                                    f"watch error: {obj.get('message') or obj}")
                yield kind, obj
        finally:
            response.close()
            response.release_conn()

    # -- the chief's pod and log -------------------------------------------------------------
    def chief_pod(self, namespace: str, name: str, replicated_job: str,
                  timeout_s: float) -> str:
        """The newest pod of worker 0 (Job 0, completion index 0), or ``""``."""
        from gkeflow.components.scaleout.cluster import JOB_INDEX_LABEL

        return self.newest_pod(namespace, ",".join((
            f"{js.NAME_LABEL}={name}", f"{js.REPLICATED_JOB_LABEL}={replicated_job}",
            f"{JOB_INDEX_LABEL}=0", f"{js.INDEX_LABEL}=0")), timeout_s)

    @_answered
    def newest_pod(self, namespace: str, label_selector: str, timeout_s: float) -> str:
        """The newest pod matching ``label_selector``, or ``""``."""
        pods = self.core.list_namespaced_pod(
            namespace, _request_timeout=_timeout(timeout_s), label_selector=label_selector)
        items = sorted(pods.items, key=lambda p: (str(p.metadata.creation_timestamp or ""),
                                                  p.metadata.name))
        return items[-1].metadata.name if items else ""

    @_answered
    def log_since(self, namespace: str, pod: str, since_time: str, limit_bytes: int,
                  timeout_s: float) -> str:
        """The pod's log with timestamps, from ``since_time`` (RFC 3339, whole seconds; ``""``
        for the beginning), at most ``limit_bytes``; ``""`` while it has not started (400)
        or when it is gone (404)."""
        from kubernetes.client.exceptions import ApiException

        query = [("timestamps", "true"), ("limitBytes", str(limit_bytes))]
        if since_time:
            query.append(("sinceTime", since_time))
        try:
            # sinceTime is a PodLogOptions field the generated client does not expose.
            response = self.api_client.call_api(
                "/api/v1/namespaces/{namespace}/pods/{name}/log", "GET",
                path_params={"namespace": namespace, "name": pod}, query_params=query,
                header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"],
                _preload_content=False, _return_http_data_only=True,
                _request_timeout=_timeout(timeout_s))
        except ApiException as exc:
            if _status(exc) in (400, 404):
                return ""
            raise
        try:
            return response.data.decode("utf-8", errors="replace")
        finally:
            response.release_conn()

    @_answered
    def service_account_exists(self, namespace: str, name: str, timeout_s: float) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.read_namespaced_service_account(name, namespace,
                                                      _request_timeout=_timeout(timeout_s))
            return True
        except ApiException as exc:
            if _status(exc) == 404:
                return False
            raise


def _lines(response) -> Iterator[bytes]:
    """Whole lines of a streamed response, as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():  # the API server ends every event with a newline
        raise BrokenStream(f"watch stream ended in the middle of an event "
                           f"({len(pending)} bytes)")
