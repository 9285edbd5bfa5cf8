"""What `gkeflow run --data` accepts: exactly what the data-preparation step reads.

Local files, directories and globs are checked here (before any step starts) and made
absolute, since the steps run in other working directories; ``gs://``, ``bq://`` and
``embedded://`` URIs are passed through unchanged: the step reads them with the
credentials of the environment (``gcloud auth application-default login``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REMOTE_SCHEMES = ("gs://", "bq://", "embedded://")


class RunInputError(ValueError):
    """``--data`` names nothing the pipeline can read; the message says why."""


def resolve_data_uri(data: str) -> str:
    """``data`` as the pipeline's ``data_uri``: remote URIs unchanged, local paths, globs
    and directories absolute, after checking that they name at least one file."""
    from gkeflow.components.prepare.sources import DataError, local_sources

    text = data.strip()
    if text.startswith(REMOTE_SCHEMES):
        if text.startswith("gs://") and not re.match(r"^gs://[^/*?\[]+(/.*)?$", text):
            raise RunInputError(f"malformed Cloud Storage URI {text!r}; expected "
                                "gs://bucket/path (globs allowed in the path)")
        if text.startswith("bq://") and not re.match(r"^bq://[^./]+\.[^./]+\.[^./]+$", text):
            raise RunInputError(f"malformed BigQuery URI {text!r}; expected "
                                "bq://project.dataset.table")
        check_credentials_for(text)
        return text
    if "://" in text and not text.startswith("file://"):
        raise RunInputError(f"unsupported URI scheme in {text!r}; use a local file, "
                            "directory or glob, gs://bucket/path or bq://project.dataset.table")
    local = os.path.abspath(os.path.expanduser(text.removeprefix("file://")))
    try:
        local_sources(local)
    except DataError as exc:
        raise RunInputError(str(exc)) from None
    return local


#: Scheme -> the variable that points its client at an emulator (which needs no credentials).
EMULATORS = {"gs://": "STORAGE_EMULATOR_HOST", "bq://": "BIGQUERY_API_ENDPOINT"}


def check_credentials_for(uri: str) -> None:
    """RunInputError, in one line, when the steps would read ``uri`` (gs:// or bq://) with
    Application Default Credentials and this environment has none."""
    from gkeflow.pipelines.targets.credentials import CredentialsError, google_credentials

    scheme = next((s for s in EMULATORS if uri.startswith(s)), None)
    if scheme is None or os.environ.get(EMULATORS[scheme]):
        return
    try:
        google_credentials(f"--data {uri}")
    except CredentialsError as exc:
        raise RunInputError(str(exc)) from None


def default_model_name(data: str | None, task: str = "classification") -> str:
    """``penguins-classifier`` for the bundled data, else ``<data name>-classifier``: the
    table of a ``bq://`` URI, the file, or the directory of a glob (``-regressor`` for
    regression)."""
    kind = "regressor" if task == "regression" else "classifier"
    if not data:
        return f"penguins-{kind}"
    text = data.rstrip("/")
    if text.startswith("bq://"):
        name = text.rsplit(".", 1)[-1]
    else:
        parts = [p for p in re.split(r"[/\\]", text) if p and not re.search(r"[*?\[]", p)]
        name = Path(parts[-1]).name if parts else "model"
        for suffix in (".gz", ".csv", ".parquet", ".pq"):
            name = name.removesuffix(suffix)
    stem = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "model"
    if not stem[0].isalpha():
        stem = f"m-{stem}"
    return f"{stem[:50]}-{kind}"
