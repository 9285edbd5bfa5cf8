"""How the ``gkeflow`` command reports failures: one short line with the fix, exit 1.

Every command runs under :class:`ErrorReportingGroup`. Expected failures (bad config,
refused or unreachable servers, missing credentials) print their own message; anything
else prints its type and message. The traceback is shown only with ``gkeflow --debug``
(or ``GKEFLOW_DEBUG=1``).
"""

from __future__ import annotations

import os

import click

DEBUG_ENV = "GKEFLOW_DEBUG"


def describe(exc: BaseException) -> tuple[str, bool]:
    """One line for ``exc`` and whether it is an expected failure (its message is then
    enough); else its type and message."""
    from gkeflow.pipelines.targets.credentials import ADC_FIX
    from gkeflow.pipelines.targets.transport import classify, redact

    try:
        from google.auth import exceptions as auth
    except ImportError:  # pragma: no cover - google-auth is a dependency
        auth = None
    if auth is not None and isinstance(exc, auth.DefaultCredentialsError):
        return f"no Google credentials found: {ADC_FIX}", True
    if auth is not None and isinstance(exc, auth.RefreshError):
        return f"the Google credentials were refused ({exc}); {ADC_FIX}", True
    if auth is not None and isinstance(exc, auth.TransportError):
        return (f"cannot reach Google's token service ({type(exc).__name__}); check the "
                "network"), True
    failure = classify(exc)
    if failure is not None:
        return redact(f"remote call failed: {failure.message}"), True
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, expected_types()):
        return redact(text or type(exc).__name__), True
    return redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__), False


def expected_types() -> tuple[type, ...]:
    from gkeflow.components.deploy.logic import DeploySettingsError
    from gkeflow.components.images import ImageLockError
    from gkeflow.components.predict.resolve import PredictError
    from gkeflow.components.register.local_registry import RegistryError
    from gkeflow.pipelines.settings.config import ConfigError
    from gkeflow.pipelines.settings.cron import CronError
    from gkeflow.pipelines.targets.backend_version import BackendTooOld
    from gkeflow.pipelines.targets.credentials import CredentialsError
    from gkeflow.pipelines.targets.transport import RemoteError

    types: list[type] = [ConfigError, CredentialsError, CronError, RemoteError, LookupError,
                         BackendTooOld, ImageLockError, DeploySettingsError, RegistryError,
                         PredictError]
    try:
        from gkeflow.pipelines.targets.submit import SubmitError

        types.append(SubmitError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


def debug_enabled(ctx: click.Context | None) -> bool:
    if os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes"):
        return True
    root = ctx.find_root() if ctx else None
    return bool(root and (root.obj or {}).get("debug"))


class ErrorReportingGroup(click.Group):
    """A click group whose commands fail with one line (traceback behind ``--debug``)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException,
                SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:
            if debug_enabled(ctx):
                raise
            from gkeflow.pipelines.cli.fs_errors import describe_file_system_error

            message = describe_file_system_error(exc, ctx.invoked_subcommand)
            if message is not None:
                raise click.ClickException(message) from None
            message, expected = describe(exc)
            if not expected:
                message += " (`gkeflow --debug ...` shows the traceback)"
            raise click.ClickException(message) from None
