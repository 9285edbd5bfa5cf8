"""Google credentials for the remote targets, with errors a person can act on.

``google.auth`` reports missing or expired Application Default Credentials with a long
message (and, uncaught, a 40-line traceback). Here they become :class:`CredentialsError`:
one line naming what needed them and the command that fixes it.

Without a credentials file, ``google.auth.default()`` looks for the Compute Engine metadata
server: three tries of 3 s each plus back-off, with a warning per try, about 15 s on a
machine that drops packets to 169.254.169.254. Here that server is asked once, with a short
timeout (``GCE_METADATA_TIMEOUT`` seconds when set, else 1 s; ``NO_GCE_CHECK=true`` skips it),
and only when no other source of credentials exists.
"""

from __future__ import annotations

import os

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
ADC_FIX = ("run `gcloud auth application-default login` (or set "
           "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file)")


class CredentialsError(RuntimeError):
    """No usable credentials; the message says for what, and how to get them."""


#: How long the one probe of the metadata server waits, unless GCE_METADATA_TIMEOUT says.
METADATA_PROBE_TIMEOUT_S = 1.0


def _adc_file() -> str:
    """Where `gcloud auth application-default login` writes the credentials."""
    config = os.environ.get("CLOUDSDK_CONFIG")
    if not config:
        config = (os.path.join(os.environ.get("APPDATA", ""), "gcloud") if os.name == "nt"
                  else os.path.join(os.path.expanduser("~"), ".config", "gcloud"))
    return os.path.join(config, "application_default_credentials.json")


def has_credentials_source() -> bool:
    """Whether a source that ``google.auth.default()`` reads without the network exists: the
    key file in GOOGLE_APPLICATION_CREDENTIALS, gcloud's credentials file, App Engine."""
    return bool(os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
                or os.path.exists(_adc_file())
                or os.environ.get("SERVER_SOFTWARE", "").startswith("Google App Engine"))


def metadata_server_answers() -> bool:
    """One request to the Compute Engine metadata server (GKE, Cloud Run, Cloud Build and
    Compute Engine have one), with a short timeout; no retries."""
    if os.environ.get("NO_GCE_CHECK") == "true":
        return False
    import requests

    try:
        timeout = float(os.environ.get("GCE_METADATA_TIMEOUT") or METADATA_PROBE_TIMEOUT_S)
    except ValueError:
        timeout = METADATA_PROBE_TIMEOUT_S
    address = os.environ.get("GCE_METADATA_IP") or "169.254.169.254"
    session = requests.Session()
    session.trust_env = False  # the metadata server is never behind a proxy
    try:
        answer = session.get(f"http://{address}/", headers={"Metadata-Flavor": "Google"},
                             timeout=timeout, allow_redirects=False)
    except requests.RequestException:
        return False
    finally:
        session.close()
    return answer.status_code == 200 and answer.headers.get("Metadata-Flavor") == "Google"


def google_credentials(what: str):
    """Application Default Credentials for ``what`` (e.g. ``targets.vertex``); fails within
    about a second when there are none (see the module docstring)."""
    import google.auth
    from google.auth import exceptions

    if not has_credentials_source() and not metadata_server_answers():
        raise CredentialsError(f"no Google credentials found for {what}: {ADC_FIX}")
    try:
        credentials, _ = google.auth.default(scopes=list(SCOPES))
    except exceptions.DefaultCredentialsError:
        raise CredentialsError(f"no Google credentials found for {what}: {ADC_FIX}") from None
    return credentials


def google_access_token(timeout_s: float, what: str) -> str:
    """A fresh access token from Application Default Credentials, fetched within
    ``timeout_s`` (google.auth's own default is 120 s)."""
    import google.auth.transport.requests
    from google.auth import exceptions

    credentials = google_credentials(what)

    class _Request(google.auth.transport.requests.Request):
        def __call__(self, *args, **kwargs):
            kwargs["timeout"] = min(kwargs.get("timeout") or timeout_s, timeout_s)
            return super().__call__(*args, **kwargs)

    try:
        credentials.refresh(_Request())
    except exceptions.RefreshError as exc:
        raise CredentialsError(f"the Google credentials for {what} were refused ({exc}); "
                               f"{ADC_FIX}") from None
    except exceptions.TransportError as exc:
        raise CredentialsError(f"cannot reach Google to refresh the credentials for {what} "
                               f"({type(exc).__name__}); check the network") from None
    return credentials.token
