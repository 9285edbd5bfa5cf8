"""A fingerprint of what a data URI names, computed when the pipeline runs.

KFP and Vertex cache a step on its component and input *values*, not on the bytes behind a
URI: a ``data_uri`` that stays the same while the file changes would be served from cache.
So a light, never-cached step computes this fingerprint at run time and passes it to the
(cached) data preparation as a parameter: same content -> same key -> cache hit; any change
-> new key -> preparation (and everything downstream) runs again.

What goes in, per source kind:

* local files, directories, globs: each file's path, size, mtime and a BLAKE2b hash of its
  bytes (the content decides; mtime and size are listed for the report);
* ``gs://``: each object's name, generation, size and CRC32C (object metadata only: no
  download);
* ``bq://``: the table's last-modified time, row count and the query/filter text (a query
  hash alone would freeze the cache while the tables behind it change, so the table's
  modification time is part of it too);
* ``embedded://penguins``: the bundled file's bytes.

The fingerprint is ``sha256:<hex>`` of a canonical JSON of those facts.

:func:`code_fingerprint` does the same for a training ``user_module`` (a ``.py`` file or an
importable module: its source bytes), so that training's cache key follows the model code
too, without touching preparation's.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 4 << 20


@dataclass
class Fingerprint:
    value: str  # "sha256:<hex>"
    kind: str  # local | gcs | bigquery | embedded
    items: list[dict] = field(default_factory=list)  # what was hashed, one entry per source


def file_digest(path: Path) -> str:
    """BLAKE2b-256 of a file's bytes, read in chunks."""
    digest = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _local_items(pattern: str) -> list[dict]:
    from gkeflow.components.prepare.sources import local_sources

    items = []
    for source in local_sources(pattern):
        path = Path(source.name)
        stat = path.stat()
        items.append({"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                      "blake2b": file_digest(path)})
    return items


def _gcs_items(uri: str, client=None) -> list[dict]:
    from gkeflow.components.prepare.sources import gcs_client, gcs_sources

    client = client or gcs_client()
    items = []
    # gcs_sources lists (and so resolves globs and "directories") exactly as prepare does.
    for source in gcs_sources(uri, client=client):
        bucket_name, _, name = source.name.removeprefix("gs://").partition("/")
        blob = client.bucket(bucket_name).get_blob(name)
        if blob is None:  # deleted between the listing and now
            from gkeflow.components.prepare.sources import DataError

            raise DataError(f"{source.name} disappeared while it was being fingerprinted")
        items.append({"name": source.name, "generation": blob.generation, "size": blob.size,
                      "crc32c": blob.crc32c, "md5": blob.md5_hash})
    return items


def _bigquery_items(uri: str, query: str, row_filter: str) -> list[dict]:
    from gkeflow.components.prepare.bigquery import BQ, bigquery_client
    from gkeflow.components.prepare.sources import DataError

    match = BQ.match(uri)
    if not match:
        raise DataError(f"malformed BigQuery URI {uri!r}; expected bq://project.dataset.table")
    table_id = f"{match['project']}.{match['dataset']}.{match['table']}"
    table = bigquery_client(match["project"]).get_table(table_id)
    modified = table.modified.isoformat() if table.modified else ""
    return [{"table": table_id, "modified": modified, "num_rows": table.num_rows,
             "etag": table.etag or "",
             "query_sha256": hashlib.sha256(query.encode()).hexdigest() if query else "",
             "filter": row_filter}]


def fingerprint(data_uri: str, bq_query: str = "", bq_filter: str = "") -> Fingerprint:
    """The fingerprint of the data ``data_uri`` names (see the module docstring).

    Raises:
        DataError: the URI names nothing (no file, no object, malformed).
    """
    from gkeflow.components.cloud.mounts import mounted_path
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS

    read_uri = mounted_path(data_uri)  # a bucket mounted in this step is listed there
    if data_uri == EMBEDDED_PENGUINS:
        import palmerpenguins

        kind = "embedded"
        items = _local_items(str(Path(palmerpenguins.__file__).parent / "data" / "penguins.csv"))
        for item in items:  # the same bytes wherever the package is installed
            item.pop("path"), item.pop("mtime_ns")
    elif read_uri.startswith("gs://"):
        kind, items = "gcs", _gcs_items(data_uri)
    elif data_uri.startswith("bq://"):
        kind, items = "bigquery", _bigquery_items(data_uri, bq_query, bq_filter)
    else:
        kind = "local"
        items = _local_items(os.path.expanduser(read_uri.removeprefix("file://")))
    canonical = json.dumps({"uri": data_uri, "kind": kind, "items": items}, sort_keys=True,
                           default=str)
    return Fingerprint(f"sha256:{hashlib.sha256(canonical.encode()).hexdigest()}", kind, items)


def code_fingerprint(user_module: str) -> str:
    """``sha256:<hex>`` of a user module's source (``""`` for the built-in models).

    A ``.py`` path is read as is; a dotted module name is located without importing it.
    A module that cannot be found here still gets a value (from its name), so that the
    step fails where the module is used, with that step's error, not here.
    """
    if not user_module:
        return ""
    source: bytes | None = None
    path = Path(os.path.expanduser(user_module))
    if user_module.endswith(".py") and path.is_file():
        source = path.read_bytes()
    elif not user_module.endswith(".py"):
        import importlib.util

        try:
            spec = importlib.util.find_spec(user_module)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            source = Path(spec.origin).read_bytes()
    digest = hashlib.sha256(user_module.encode() + b"\0" + (source or b"<not found>"))
    return f"sha256:{digest.hexdigest()}"
