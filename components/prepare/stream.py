"""The streaming pass: each input file's blocks parsed, typed, split, counted and written
by parallel lanes (memory bounded by a few blocks, whatever the input size)."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from gkeflow.components.prepare import records
from gkeflow.components.prepare.batch import Batch, Plan
from gkeflow.components.prepare.csv_reader import RowOrigin
from gkeflow.components.prepare.rejects import RejectLog
from gkeflow.components.prepare.schema import Schema
from gkeflow.components.prepare.sources import DataError, Source, numbered
from gkeflow.components.prepare.splits import SPLITS, splits_from_hashes
from gkeflow.components.prepare.stats import (
    CategoricalStats,
    NumericStats,
    update_numeric_stats,
)


@dataclass
class _Partial:
    """What one input file contributed."""

    rows_read: int = 0
    split_rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SPLITS, 0))
    stats: dict[str, dict[str, NumericStats | CategoricalStats]] = field(default_factory=dict)
    unseen: Counter = field(default_factory=Counter)
    nonfinite: Counter = field(default_factory=Counter)
    shards: dict[str, list[Path]] = field(default_factory=dict)


def new_stats(schema: Schema) -> dict[str, dict]:
    return {
        split: {c.name: NumericStats() if c.type == "numeric" else CategoricalStats()
                for c in schema.columns}
        for split in SPLITS
    }


def _process_batch(raw: pa.RecordBatch, source: Source, plan: Plan, partial: _Partial,
                   writers: records.SplitWriters, rejects: RejectLog,
                   origin: RowOrigin) -> None:
    if raw.num_rows == 0:
        return
    if raw.schema.names != plan.header:
        raise DataError(
            f"{source.name} has columns {raw.schema.names}, unlike the first input file's "
            f"{plan.header}"
        )
    schema = plan.schema
    batch = Batch(raw, plan, origin)
    partial.rows_read += batch.n
    partial.unseen.update(batch.unseen)
    partial.nonfinite.update(batch.nonfinite)
    bad_rows = np.flatnonzero(batch.reason >= 0)
    if bad_rows.size:
        rejects.add_many(
            source.name, *batch.rejected(bad_rows),
            [batch.reason_texts[batch.reason[i]] for i in bad_rows],
            [batch.reason_columns[batch.reason[i]] for i in bad_rows],
        )
    hashes = batch.row_hashes(plan)
    codes = splits_from_hashes(hashes, plan.ratios)
    codes[bad_rows] = -1
    # the rows grouped by split (rejected first) and, within a split, ordered by 12 low bits
    # of their hash: a pseudo-random order independent of the input's (sorted files come out
    # shuffled, so readers need no per-row shuffle); a 16-bit key sorts by radix in linear
    # time; one gather per column, then each split is a contiguous slice
    key = ((codes + 1).astype(np.uint16) << np.uint16(12)) | (
        hashes & np.uint64(0xFFF)).astype(np.uint16)
    order = np.argsort(key, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(SPLITS) + 1), side="left")
    order = order[bounds[0]:]
    bounds = bounds - bounds[0]
    numeric_names = [c.name for c in schema.columns if c.type == "numeric"]
    numeric = np.empty((len(numeric_names), order.size), dtype=np.float64)
    for row, name in enumerate(numeric_names):
        np.take(batch.numeric[name], order, out=numeric[row])
    numeric32 = numeric.astype(np.float32)
    categorical = {c.name: batch.categorical[c.name][0][order] for c in schema.columns
                   if c.type != "numeric"}
    entries = {  # each dictionary value's protobuf encoding, shared by the blocks
        name: records.bytes_entries([v.encode("utf-8") for v in dictionary] + [b""])
        for name, (_, dictionary) in batch.categorical.items()
    }
    for code, split in enumerate(SPLITS):
        start, stop = int(bounds[code]), int(bounds[code + 1])
        if stop == start:
            continue
        partial.split_rows[split] += stop - start
        stats = partial.stats[split]
        update_numeric_stats([stats[name] for name in numeric_names],
                             numeric[:, start:stop])
        split_categorical = {name: indices[start:stop] for name, indices in categorical.items()}
        _update_categorical_stats(stats, split_categorical, batch)
        _write_blocks(writers, split,
                      {name: numeric32[row, start:stop] for row, name in enumerate(numeric_names)},
                      split_categorical, entries, stop - start)


def process_source(index: int, source: Source, plan: Plan, scratch: Path,
                    rejects: RejectLog, lanes: int = 1) -> list[_Partial]:
    """Stream one input file. With several lanes its batches are dealt round-robin to
    that many threads (each with its own shards), so one large file uses several cores."""
    partials = [_Partial(stats=new_stats(plan.schema)) for _ in range(lanes + 1)]
    unparsed = partials[-1]  # rows the CSV parser rejected (counted as the lanes parse)
    writers = [records.SplitWriters(scratch, f"part-{index:05d}-{lane}", SPLITS,
                                    plan.rows_per_shard) for lane in range(lanes)]

    unparsed_lock = threading.Lock()

    def reject_unparsed(name: str, line: int, raw: bytes, reason: str) -> None:
        rejects.add(name, line, raw, reason)
        with unparsed_lock:
            unparsed.rows_read += 1

    inboxes = [queue.Queue(maxsize=1) for _ in range(lanes)]
    errors: list[BaseException] = []
    failed = threading.Event()

    def lane_main(lane: int) -> None:
        while True:
            parse = inboxes[lane].get()
            if parse is None:
                return
            if failed.is_set():
                continue
            try:
                item = parse()
                if item is None:
                    continue
                raw, origin = item
                _process_batch(raw, source, plan, partials[lane], writers[lane], rejects,
                               origin)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
                failed.set()

    threads = [threading.Thread(target=lane_main, args=(k,), daemon=True)
               for k in range(lanes)]
    for thread in threads:
        thread.start()
    try:
        for i, parse in enumerate(_blocks(source, plan, reject_unparsed)):
            if failed.is_set():
                break
            inboxes[i % lanes].put(parse)
    finally:
        for inbox in inboxes:
            inbox.put(None)
        for thread in threads:
            thread.join()
        for writer in writers:
            try:
                writer.close()
            except BaseException as exc:  # noqa: BLE001 (re-raised)
                errors.append(exc)
    if errors:
        raise errors[0]
    for partial, writer in zip(partials, writers, strict=False):  # one writer per lane used
        partial.shards = writer.paths
    return partials


def _blocks(source, plan: Plan, reject):
    """A source's blocks, each a function returning ``(batch, origin)`` or None; numeric
    columns parsed as numbers where the source can (see ``Source.typed_blocks``)."""
    if not hasattr(source, "typed_blocks"):  # e.g. BigQuery: typed by its own schema
        return numbered(source.batches(reject), getattr(source, "first_row", 1))
    numeric = [c.name for c in plan.schema.columns if c.type == "numeric"]
    return source.typed_blocks(reject, numeric)


def _update_categorical_stats(stats: dict, categorical: dict[str, np.ndarray],
                              batch: Batch) -> None:
    for name, indices in categorical.items():
        dictionary = batch.categorical[name][1]
        counts = np.bincount(indices, minlength=len(dictionary) + 1)
        present = np.flatnonzero(counts[:-1])
        stats[name].add_counts({dictionary[i]: int(counts[i]) for i in present},
                               int(counts[-1]))


def _write_blocks(writers: records.SplitWriters, split: str, numeric: dict[str, np.ndarray],
                  categorical: dict[str, np.ndarray], entries: dict[str, list[bytes]],
                  rows: int) -> None:
    """Encode and queue one split's rows of a batch, in blocks of up to BLOCK_ROWS rows;
    ``entries``: per categorical column, its dictionary values' protobuf encodings."""
    step = min(records.BLOCK_ROWS, writers.rows_per_shard)
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        block_numeric = {name: values[start:stop] for name, values in numeric.items()}
        block_categorical = {}
        for name, all_indices in categorical.items():
            indices = all_indices[start:stop]
            encoded = entries[name]
            present = np.bincount(indices, minlength=len(encoded)) > 0
            used = np.flatnonzero(present)  # the block's own, smaller dictionary
            local = (np.cumsum(present) - 1)[indices]
            block_categorical[name] = (records.EncodedValues(encoded[i] for i in used), local)
        writers.write(split, records.encode_block(stop - start, block_numeric,
                                                  block_categorical), stop - start)
