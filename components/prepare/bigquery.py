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

from gkeflow.components.prepare.sources import DataError, prefetched

PAGE_ROWS = 50_000
BQ = re.compile(r"^bq://(?P<project>[A-Za-z0-9_:.\-]+)\.(?P<dataset>\w+)\.(?P<table>[\w\-$]+)$")
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

    def __init__(self, uri: str, query: str = "", row_filter: str = "", client=None,
                 start_index: int = 0, max_results: int | None = None):
        match = BQ.match(uri)
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
        if (start_index or max_results is not None) and query:
            raise DataError("a range of rows can be read from a table, not from a query")
        #: The range read (rows of the table in tabledata.list order): from start_index,
        #: max_results rows (None: to the end). Rows are numbered from first_row.
        self.start_index = start_index
        self.max_results = max_results
        self.first_row = start_index + 1
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
                                              page_size=PAGE_ROWS,
                                              start_index=self.start_index or None,
                                              max_results=self.max_results)
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
        return prefetched(iterator) if prefetch else iterator

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


# --- reading one table in several ranges (fan-out preparation) --------------------------------

#: A fan-out range holds at least this many rows (fewer, larger ranges for small tables).
MIN_RANGE_ROWS = 100_000


def table_state(uri: str, client=None) -> tuple[int, int]:
    """``(numRows, lastModifiedTime in ms)`` of the table ``uri`` names (``tables.get``)."""
    from google.api_core import exceptions

    source = BigQuerySource(uri)
    client = client or bigquery_client(source.project)
    try:
        table = client.get_table(source.table_id)
    except exceptions.NotFound as exc:
        raise DataError(f"BigQuery table or dataset not found: {uri}: {exc.message}") from exc
    modified = table.modified
    return int(table.num_rows or 0), round(modified.timestamp() * 1000) if modified else 0


def check_unchanged(uri: str, modified_ms: int, client=None) -> None:
    """Fail when the table was modified since the plan recorded ``modified_ms``: its rows
    could have moved between the ranges, so some would be read twice and others not."""
    _, now = table_state(uri, client)
    if now != modified_ms:
        raise DataError(
            f"BigQuery table {uri} changed while it was being prepared (last modified "
            f"{now} ms, the plan saw {modified_ms} ms): run the preparation again once it "
            "has stopped changing, or prepare a snapshot or copy of it")


def plan_ranges(num_rows: int, max_ranges: int,
                min_rows: int = MIN_RANGE_ROWS) -> list[tuple[int, int | None]]:
    """Split ``num_rows`` rows into at most ``max_ranges`` contiguous ranges
    ``(start_index, max_results)`` of at least ``min_rows`` rows (but one); the last one is
    open-ended (``None``: to the end of the table), so no row is left out."""
    count = max(1, min(max_ranges, num_rows // max(1, min_rows)))
    bounds = [round(k * num_rows / count) for k in range(count + 1)]
    return [(bounds[k], bounds[k + 1] - bounds[k] if k < count - 1 else None)
            for k in range(count)]
