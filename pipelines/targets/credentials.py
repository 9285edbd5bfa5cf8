"""Google credentials for the remote targets, with errors a person can act on.

``google.auth`` reports missing or expired Application Default Credentials with a long
message (and, uncaught, a 40-line traceback). Here they become :class:`CredentialsError`:
one line naming what needed them and the command that fixes it.
"""

from __future__ import annotations

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
ADC_FIX = ("run `gcloud auth application-default login` (or set "
           "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file)")


class CredentialsError(RuntimeError):
    """No usable credentials; the message says for what, and how to get them."""


def google_credentials(what: str):
    """Application Default Credentials for ``what`` (e.g. ``targets.vertex``)."""
    import google.auth
    from google.auth import exceptions

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
