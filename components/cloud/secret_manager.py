"""Reading a secret's value from Secret Manager's REST API (``versions/latest`` unless the
name gives a version), with the caller's own retries and error wording.

A plain-http loopback endpoint (``GKEFLOW_SECRET_MANAGER_ENDPOINT``) is an emulator and gets
no credentials; any other endpoint gets the environment's Application Default Credentials.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping
from typing import Any

ENDPOINT_ENV = "GKEFLOW_SECRET_MANAGER_ENDPOINT"
DEFAULT_ENDPOINT = "https://secretmanager.googleapis.com"
_LOOPBACK = re.compile(r"^http://(127\.0\.0\.1|localhost)(:\d+)?$")


def access_request(version: str, environ: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """A session to send the request with, and the ``:access`` URL of secret ``version``
    (``projects/P/secrets/S`` or ``.../versions/V``)."""
    env = os.environ if environ is None else environ
    endpoint = env.get(ENDPOINT_ENV, DEFAULT_ENDPOINT).rstrip("/")
    if _LOOPBACK.match(endpoint):
        import requests

        session: Any = requests.Session()
    else:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"])
        session = AuthorizedSession(credentials)
    if "/versions/" not in version:
        version = f"{version}/versions/latest"
    return session, f"{endpoint}/v1/{version}:access"


def secret_value(answer: Mapping) -> str:
    """The text of an ``:access`` answer's payload, without surrounding whitespace."""
    return base64.b64decode(answer["payload"]["data"]).decode().strip()
