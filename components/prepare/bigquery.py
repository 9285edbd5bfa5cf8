"""BigQuery tables and queries as a prepare source, through google-cloud-bigquery.

``bq://project.dataset.table`` reads the table page by page (``tabledata.list``); with
``row_filter`` it runs ``SELECT * FROM `project.dataset.table` WHERE <row_filter>``, with
``query`` it runs that query (``jobs.query`` then ``getQueryResults`` pages). Pages arrive
as Arrow record batches, so memory stays bounded by a page. Credentials come from the
environment (Application Default Credentials); ``BIGQUERY_API_ENDPOINT`` points the client
at another endpoint (an emulator), with anonymous credentials.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pyarrow as pa

from gkeflow.components.prepare.sources import DataError, _prefetched

PAGE_ROWS = 50_000
_BQ = re.compile(r"^bq://(?P<project>[A-Za-z0-9_:.\-]+)\.(?P<dataset>\w+)\.(?P<table>[\w\-$]+)$")
#: rows kept from the first pages so the full pass replays them instead of re-reading
CACHED_ROWS = 10_000


def bigquery_client(project: str):
    from google.cloud import bigquery

    endpoint = os.environ.get("BIGQUERY_API_ENDPOINT")
    if endpoint:
        from google.auth.credentials import AnonymousCredentials

        return bigquery.Client(project=project, credentials=AnonymousCredentials(),
                               client_options={"api_endpoint": endpoint})
    return bigquery.Client(project=project)


class BigQuerySource:
    """Rows of a table or query; iterated once for the schema sample, then in full."""

    format = "bigquery"

    def __init__(self, uri: str, query: str = "", row_filter: str = "", client=None):
        match = _BQ.match(uri)
        if not match:
            raise DataError(
                f"malformed BigQuery URI {uri!r}; expected bq://project.dataset.table"
            )
        self.name = uri
        self.project = match["project"]
        self.table_id = f"{match['project']}.{match['dataset']}.{match['table']}"
        if query and row_filter:
            raise DataError("give either bq_query or bq_filter, not both")
        if row_filter:
            query = f"SELECT * FROM `{self.table_id}` WHERE {row_filter}"
        self.query = query
        self._client = client
        self._rows = None
        self._pages: Iterator[pa.RecordBatch] | None = None
        self._cache: list[pa.RecordBatch] = []
        self._cached_rows = 0
        self._done = False

    def _start(self) -> None:
        if self._rows is not None:
            return
        from google.api_core import exceptions

        client = self._client or bigquery_client(self.project)
        try:
            if self.query:
                self._rows = client.query_and_wait(self.query, page_size=PAGE_ROWS)
            else:
                self._rows = client.list_rows(client.get_table(self.table_id),
                                              page_size=PAGE_ROWS)
        except exceptions.NotFound as exc:
            raise DataError(f"BigQuery table or dataset not found: {self.name}: "
                            f"{exc.message}") from exc
        except exceptions.BadRequest as exc:
            raise DataError(f"BigQuery rejected the query for {self.name}: {exc.message}") from exc
        self._pages = iter(self._rows.to_arrow_iterable())

    def header(self) -> list[str]:
        self._start()
        names = [field.name for field in self._rows.schema]
        if not names:
            raise DataError(f"BigQuery result has no columns: {self.name}")
        return names

    def batches(self, reject=None, prefetch: bool = True) -> Iterator[pa.RecordBatch]:
        iterator = self._replay_then_read()
        return _prefetched(iterator) if prefetch else iterator

    def _replay_then_read(self) -> Iterator[pa.RecordBatch]:
        self._start()
        i = 0
        while True:
            if i < len(self._cache):
                yield self._cache[i]
                i += 1
                continue
            if self._done:
                return
            try:
                page = next(self._pages)
            except StopIteration:
                self._done = True
                return
            batches = page.to_batches() if isinstance(page, pa.Table) else [page]
            if self._cached_rows < CACHED_ROWS:  # kept whole, replayed by the loop above
                self._cache.extend(batches)
                self._cached_rows += sum(b.num_rows for b in batches)
                continue
            yield from batches


def bigquery_sources(uri: str, query: str = "", row_filter: str = "") -> list[BigQuerySource]:
    return [BigQuerySource(uri, query=query, row_filter=row_filter)]
