"""Whether the MLflow tracking server a cloud run will log to answers, asked before the run.

``submit`` and ``schedule apply`` send runs whose steps log to ``tracking.mlflow``'s
server; a server that is down or misspelt is found out only when a step fails to log. So
the server's ``/health`` is asked once, briefly, from where the command runs. Any HTTP
answer counts (401 and 403 included: the server is there, the steps bring credentials).
A cluster-internal name (``*.svc``, ``*.svc.cluster.local``, a bare service name) cannot
be asked from outside the cluster and is said to be unchecked. Nothing is refused: the
cluster may reach what this machine cannot; the finding is one warning line.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import urlsplit

TIMEOUT_S = 3.0


def cluster_internal(host: str) -> bool:
    """A name only the cluster's DNS resolves."""
    return "." not in host or host.endswith((".svc", ".svc.cluster.local", ".cluster.local"))


def probe(tracking_uri: str, timeout_s: float = TIMEOUT_S) -> str:
    """'' when the server answered; else one line saying what was found (never a secret:
    the URI holds no credentials, :class:`~gkeflow.pipelines.settings.tracking_config.
    MlflowTracking` refuses those)."""
    host = urlsplit(tracking_uri).hostname or ""
    if not host:
        return ""
    if cluster_internal(host):
        return (f"tracking server {tracking_uri} is a cluster-internal name: not checked from "
                "here; the steps log there")
    # straight to the server, as the steps in the cluster connect: an HTTP proxy of this
    # machine answering for an unreachable host must not count as the server
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(f"{tracking_uri.rstrip('/')}/health", timeout=timeout_s):
            return ""
    except urllib.error.HTTPError:
        return ""  # it answered: up (auth, or no /health route, is the steps' business)
    except OSError as exc:  # URLError, timeouts and refused connections are all OSErrors
        reason = getattr(exc, "reason", exc)
        return (f"tracking server {tracking_uri} did not answer from here ({reason}); the "
                "steps will fail to log unless the cluster reaches it: check the server and "
                "tracking.mlflow.tracking_uri")


def is_warning(tracking_uri: str, found: str) -> bool:
    """Whether :func:`probe`'s finding is a warning (the server did not answer), not the
    note that a cluster-internal name was not asked."""
    return bool(found) and not cluster_internal(urlsplit(tracking_uri).hostname or "")


def said_as(tracking_uri: str, found: str) -> str:
    """``found`` as a line of a command's output: a warning, or a note for a name that was
    not asked."""
    return f"warning: {found}" if is_warning(tracking_uri, found) else found
