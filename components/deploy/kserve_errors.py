"""What the Kubernetes API server's refusals of KServe calls mean, in one line each.

The server answers with a ``Status`` object (``reason``, ``message``, ``details``). A 403's
message names the account and the verb (``... is forbidden: User "system:serviceaccount:
ns:sa" cannot update resource "inferenceservices" in API group "serving.kserve.io" in the
namespace "ns"``); a 404 for a missing object names it in ``details``, while a cluster
without KServe answers the bare ``404 page not found`` of a path nobody serves.
"""

from __future__ import annotations

import json
import re

RBAC_FILE = "deploy/rbac/kserve-deployer.yaml"
KSERVE_GROUP, CRD_GROUP = "serving.kserve.io", "apiextensions.k8s.io"
#: What :data:`RBAC_FILE` grants: every call :class:`~.kserve.KServeApi` makes, nothing more
#: (tests/unit/test_kserve_rbac.py holds the file to this table).
GRANTS: dict[tuple[str, str], tuple[str, ...]] = {
    (KSERVE_GROUP, "inferenceservices"): ("get", "list", "create", "update"),
    (CRD_GROUP, "customresourcedefinitions"): ("get",),
}
_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]*)")?')
_SERVICE_ACCOUNT = re.compile(r"^system:serviceaccount:([^:]+):([^:]+)$")
_INSTALL = "https://kserve.github.io/website/docs/admin-guide/overview"


class KServeError(RuntimeError):
    """A deployment that cannot be carried out; the message says why and what to do."""


class Conflict(KServeError):
    """409: the object changed since it was read (Conflict) or exists already
    (AlreadyExists); re-read and apply the change again."""


def status_body(exc: BaseException) -> dict:
    """The ``Status`` object the server answered with; empty when it sent none."""
    try:
        body = json.loads(getattr(exc, "body", None) or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


def names_object(exc: BaseException, name: str) -> bool:
    """Whether a 404 says that the object ``name`` does not exist (rather than that nothing
    serves the path)."""
    body = status_body(exc)
    if body.get("reason") != "NotFound":
        return False
    details = body.get("details") or {}
    return details.get("name") == name or f'"{name}" not found' in body.get("message", "")


def _subject(user: str) -> str:
    account = _SERVICE_ACCOUNT.match(user)
    if account:
        return f"ServiceAccount {account.group(2)} in namespace {account.group(1)}"
    return f"User {user}"


def forbidden(exc: BaseException, verb: str, group: str, resource: str,
              namespace: str) -> KServeError:
    """A 403 as: who may not do what where, and the RBAC file that grants it."""
    message = status_body(exc).get("message") or str(getattr(exc, "reason", "") or "")
    found = _FORBIDDEN.search(message)
    user = found.group("user") if found else ""
    verb = found.group("verb") if found else verb
    resource = found.group("resource") if found else resource
    group = (found.group("group") if found and found.group("group") is not None else group)
    namespace = (found.group("namespace") or "") if found else namespace
    qualified = f"{resource}.{group}" if group else resource
    where = f" in namespace {namespace}" if namespace else " (cluster-wide)"
    who = _subject(user) if user else "the account in use"
    granted = GRANTS.get((group, resource))
    if granted is None:
        return KServeError(f"forbidden: {who} may not {verb} {qualified}{where} ({message}); "
                           "gkeflow does not need that: check the cluster's admission policies")
    apply = f"kubectl apply -n {namespace or 'NAMESPACE'} -f {RBAC_FILE}"
    bind = (f"with its bindings' subject set to {who}" if user else
            "binding the account the deploy runs as")
    grant = (f"{RBAC_FILE} grants it: {apply}, {bind}" if verb in granted else
             f"gkeflow does not {verb} it; {RBAC_FILE} grants what it does "
             f"({', '.join(granted)}): {apply}, {bind}")
    return KServeError(f"forbidden: {who} may not {verb} {qualified}{where}; {grant}")


def unauthorized(exc: BaseException, what: str) -> KServeError:
    message = status_body(exc).get("message") or "Unauthorized"
    return KServeError(
        f"{what}: the cluster did not accept the credentials (401 {message}); renew them "
        "(gcloud container clusters get-credentials CLUSTER) or check the pod's service "
        "account token")


def not_installed(what: str) -> KServeError:
    return KServeError(
        f"KServe is not installed in this cluster: nothing serves {KSERVE_GROUP}/v1beta1 "
        f"inferenceservices ({what}); install KServe ({_INSTALL}) or point the kubeconfig at "
        "the cluster that has it")
