"""Data preparation fanned out over groups of input files, merged into one dataset.

Three plain steps, each a KFP component in ``fanout_component.py``:

1. :func:`plan_groups` reads the header and a sample (the same first rows a single-pod run
   samples), fixes the schema (inferred from the sample or the expected one) and deals the
   input files, in order, into at most ``max_groups`` contiguous groups (``plan.json``);
2. :func:`prepare_group` (one pod per group, under ``dsl.ParallelFor``) streams its files
   against that fixed plan, exactly as ``prepare`` does per file, writes the shards to the
   run's shard root and a small ``part.json``: per file, its row counts and mergeable
   statistics (moments, value counts), plus its rejected rows;
3. :func:`merge_groups` merges the files' statistics in input-file order, finalises the
   schema (vocabularies from all rows), applies the same checks and writes the same
   ``schema.json``, ``stats.json``, ``rejected.csv``, ``rejected.jsonl``, ``report.md`` and
   shard manifest as a single-pod run.

A row's split depends only on its own hash, so every row lands in the same split as in one
pod; the statistics are the same up to floating-point summation order.

A ``bq://project.dataset.table`` source is split the same way into contiguous row ranges of
the table (``tabledata.list`` with ``startIndex``/``maxResults``, the last range open-ended),
one per group, numbered as one pod numbers them; every group checks that the table's
``lastModifiedTime`` is still the one the plan saw before and after reading, so rows cannot
move between ranges unnoticed. A query or row filter (``bq_query``, ``bq_filter``) is read
whole by one group.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from gkeflow.components._atomic import publish_dir
from gkeflow.components.prepare import finish, logic, shard_store
from gkeflow.components.prepare.batch import Plan
from gkeflow.components.prepare.csv_reader import RowLimits
from gkeflow.components.prepare.logic import (
    REPORT_FILE,
    SPLITS,
    STATS_FILE,
    PrepareResult,
    Schema,
    SplitRatios,
)
from gkeflow.components.prepare.rejects import (
    REJECTED_FILE,
    REJECTED_JSONL,
    SAMPLE_REJECTS,
    RejectLog,
)
from gkeflow.components.prepare.sources import DataError, resolve_sources
from gkeflow.components.prepare.stats import CategoricalStats, NumericStats
from gkeflow.components.prepare.task import task_summary

PLAN_FILE = "plan.json"
PART_FILE = "part.json"
#: Most groups a plan makes (Vertex fails to collect artifacts from more than 100 iterations).
MAX_GROUPS = 100


def plan_groups(
    source: str,
    plan_dir: Path,
    label_column: str,
    max_groups: int,
    ratios: SplitRatios | None = None,
    key_column: str = "",
    expected_schema: Schema | None = None,
    reject_unseen_categories: bool = False,
    rows_per_shard: int = logic.ROWS_PER_SHARD,
    max_vocabulary: int = 1000,
    shard_root: str = "",
    exclude_columns: str | list[str] = "",
    feature_columns: str | list[str] = "",
    merge_label_case: bool = False,
    max_quoted_lines: int = RowLimits.max_quoted_lines,
    max_row_bytes: int = RowLimits.max_row_bytes,
    bq_query: str = "",
    bq_filter: str = "",
    min_range_rows: int = 0,
    task: str = "auto",
) -> list[int]:
    """Fix the schema and deal the input into groups; returns the group indices.

    Files are dealt, in order, into contiguous groups. A ``bq://`` table is split into
    contiguous row ranges of its ``tabledata.list`` order (at least ``min_range_rows``
    rows each, default ``bigquery.MIN_RANGE_ROWS``), one per group; a query or row filter
    (``bq_query``, ``bq_filter``) is read by one group.
    """
    if not 1 <= max_groups <= MAX_GROUPS:
        raise ValueError(f"max_groups must be in [1, {MAX_GROUPS}]; got {max_groups}")
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be >= 1; got {rows_per_shard}")
    limits = RowLimits(max_quoted_lines, max_row_bytes)
    problems: list[str] = []
    bq = None
    if source.startswith("bq://"):
        from gkeflow.components.prepare import bigquery

        inputs = bigquery.bigquery_sources(source, query=bq_query, row_filter=bq_filter)
        bq = {"query": bq_query, "filter": bq_filter, "ranges": [(0, None)],
              "modified_ms": None}
        if not (bq_query or bq_filter):
            rows, bq["modified_ms"] = bigquery.table_state(source)
            bq["ranges"] = bigquery.plan_ranges(rows, max_groups,
                                                min_range_rows or bigquery.MIN_RANGE_ROWS)
    elif bq_query or bq_filter:
        raise DataError("bq_query and bq_filter apply only to bq:// sources")
    else:
        inputs = _with_limits(resolve_sources(source), limits)
    header, sample, sources = logic.sample_rows(inputs, problems)
    schema = logic.fix_schema(header, sample, label_column, expected_schema, key_column,
                              exclude_columns, feature_columns, max_vocabulary, problems, task)
    files = [s.name for s in sources] if bq is None else [source] * len(bq["ranges"])
    count = min(max_groups, len(files))
    bounds = [round(k * len(files) / count) for k in range(count + 1)]
    doc = {
        "source": source,
        "header": header,
        "schema": json.loads(schema.to_json()),
        "inferred": expected_schema is None,
        "label_vocabulary": list(schema.label_vocabulary),
        "ratios": asdict(ratios or SplitRatios()),
        "key_column": key_column,
        "reject_unseen": reject_unseen_categories and expected_schema is not None,
        "rows_per_shard": rows_per_shard,
        "max_vocabulary": max_vocabulary,
        "merge_label_case": merge_label_case,
        "max_quoted_lines": max_quoted_lines,
        "max_row_bytes": max_row_bytes,
        "problems": problems,
        "files": files,
        "groups": [[bounds[k], bounds[k + 1]] for k in range(count)],
        "shard_root": shard_root,
        "bigquery": bq,
        "task": task_summary(schema, sample),
    }
    plan_dir = Path(plan_dir)
    plan_dir.mkdir(parents=True, exist_ok=True)
    (plan_dir / PLAN_FILE).write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return list(range(count))


def _with_limits(sources: list, limits: RowLimits) -> list:
    """``sources`` with the CSV row limits set (as ``prepare`` sets them)."""
    for item in sources:
        if hasattr(item, "limits"):
            item.limits = limits
    return sources


def _load_plan(plan_dir: Path) -> tuple[dict, Plan]:
    doc = json.loads((Path(plan_dir) / PLAN_FILE).read_text(encoding="utf-8"))
    schema = Schema.from_json(json.dumps(doc["schema"]))
    schema.label_vocabulary = list(doc["label_vocabulary"])
    plan = Plan(schema, doc["header"], SplitRatios(**doc["ratios"]), doc["key_column"],
                 fixed_labels=not doc["inferred"], reject_unseen=doc["reject_unseen"],
                 rows_per_shard=doc["rows_per_shard"],
                 lower_labels=doc.get("merge_label_case", False))
    return doc, plan


def _stats_state(stats: dict) -> dict:
    out = {}
    for split, columns in stats.items():
        out[split] = {}
        for name, s in columns.items():
            if isinstance(s, NumericStats):
                out[split][name] = {"kind": "numeric", **{
                    k: (None if isinstance(v, float) and math.isinf(v) else v)
                    for k, v in asdict(s).items()}}
            else:
                out[split][name] = {"kind": "categorical", "count": s.count,
                                    "missing": s.missing, "untracked": s.untracked,
                                    "values": list(s.values.items())}
    return out


def _stats_from_state(state: dict) -> dict:
    out = {}
    for split, columns in state.items():
        out[split] = {}
        for name, s in columns.items():
            if s["kind"] == "numeric":
                out[split][name] = NumericStats(
                    s["count"], s["missing"], s["mean"], s["m2"],
                    math.inf if s["min"] is None else s["min"],
                    -math.inf if s["max"] is None else s["max"])
            else:
                out[split][name] = CategoricalStats(s["count"], s["missing"],
                                                    Counter(dict(s["values"])), s["untracked"])
    return out


def prepare_group(plan_dir: Path, group: int, part_dir: Path, workers: int = 0) -> dict:
    """Stream one group's files against the plan; shards to the shard root (or into
    ``part_dir/shards`` when the plan has none), ``part.json`` and ``rejected.csv`` into
    ``part_dir`` (published atomically)."""
    doc, plan = _load_plan(plan_dir)
    if not 0 <= group < len(doc["groups"]):
        raise ValueError(f"group {group} is not in the plan ({len(doc['groups'])} groups)")
    start, stop = doc["groups"][group]
    names = doc["files"][start:stop]
    limits = RowLimits(doc.get("max_quoted_lines", RowLimits.max_quoted_lines),
                       doc.get("max_row_bytes", RowLimits.max_row_bytes))
    bq = doc.get("bigquery")
    sources = []
    for k, name in enumerate(names):
        if bq is not None:
            sources.append(_range_source(name, bq, start + k))
            continue
        found = _with_limits(resolve_sources(name), limits)
        if len(found) != 1:
            raise DataError(f"input file {name} changed since the plan was made")
        sources.append(found[0])
    if bq is not None and bq["modified_ms"] is not None:
        from gkeflow.components.prepare.bigquery import check_unchanged

        check_unchanged(doc["source"], bq["modified_ms"])
    workers = workers or os.cpu_count() or 1
    with publish_dir(Path(part_dir)) as scratch:
        root = (shard_store.resolve_shard_root("", str(shard_store.join(
            doc["shard_root"], f"group-{group:05d}"))) if doc["shard_root"]
            else str(scratch / "shards"))
        rejects = RejectLog(scratch)
        try:
            parallel = max(1, min(workers, len(sources)))
            lanes = max(1, workers // parallel)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=parallel) as pool:
                per_file = list(pool.map(
                    lambda k: logic.process_source(start + k, sources[k], plan, root,
                                                    rejects, lanes),
                    range(len(sources))))
        finally:
            rejects.close()
        if bq is not None and bq["modified_ms"] is not None:
            check_unchanged(doc["source"], bq["modified_ms"])  # no row moved while read
        inline = not doc["shard_root"]
        files = []
        for partials in per_file:
            files.append([{
                "rows_read": p.rows_read,
                "split_rows": p.split_rows,
                "stats": _stats_state(p.stats),
                "unseen": dict(p.unseen),
                "nonfinite": dict(p.nonfinite),
                "shards": {s: [str(Path(f).relative_to(scratch)) if inline else str(f)
                               for f in p.shards.get(s, ())] for s in SPLITS},
            } for p in partials])
        part = {
            "group": group,
            "files": files,
            "rejected": {"reasons": dict(rejects.reasons), "columns": dict(rejects.columns),
                         "samples": rejects.samples},
        }
        (scratch / PART_FILE).write_text(json.dumps(part), encoding="utf-8")
    rows = sum(p["rows_read"] for f in files for p in f)
    return {"group": group, "files": len(names), "rows_read": rows,
            "rejected_rows": rejects.count}


def _range_source(uri: str, bq: dict, index: int):
    """The plan's ``index``-th range of a BigQuery table (or its query, read whole)."""
    from gkeflow.components.prepare.bigquery import BigQuerySource

    start, count = bq["ranges"][index]
    if bq["query"] or bq["filter"]:
        return BigQuerySource(uri, query=bq["query"], row_filter=bq["filter"])
    return BigQuerySource(uri, start_index=start, max_results=count)


class _MergedRejects:
    """The merged groups' rejects, shaped like the single-pod reject log."""

    def __init__(self) -> None:
        self.reasons: Counter = Counter()
        self.columns: Counter = Counter()
        self.samples: list[tuple[str, str]] = []

    @property
    def count(self) -> int:
        return sum(self.reasons.values())


def merge_groups(plan_dir: Path, part_dirs: list[Path], output_dir: Path,
                 max_rejected_fraction: float = 0.1,
                 max_missing_fraction: float = 1.0) -> PrepareResult:
    """Merge every group's part into the dataset directory a single-pod run writes."""
    doc, plan = _load_plan(plan_dir)
    schema = plan.schema
    parts = [json.loads((Path(d) / PART_FILE).read_text(encoding="utf-8")) for d in part_dirs]
    by_group = {p["group"]: (p, Path(d)) for p, d in zip(parts, part_dirs, strict=True)}
    expected = set(range(len(doc["groups"])))
    if set(by_group) != expected or len(parts) != len(expected):
        raise RuntimeError(
            f"expected one part per group {sorted(expected)}; got groups "
            f"{sorted(p['group'] for p in parts)}")
    source = doc["source"]
    problems = list(doc["problems"])
    with publish_dir(Path(output_dir)) as scratch:
        rejects = _MergedRejects()
        stats = logic.new_stats(schema)
        unseen: Counter = Counter()
        nonfinite: Counter = Counter()
        rows_read = 0
        split_rows = dict.fromkeys(SPLITS, 0)
        shards: dict[str, list[str]] = {s: [] for s in SPLITS}
        with (scratch / REJECTED_FILE).open("wb") as out, \
                (scratch / REJECTED_JSONL).open("wb") as out_jsonl:
            for group in sorted(by_group):
                part, part_dir = by_group[group]
                with (part_dir / REJECTED_FILE).open("rb") as handle:
                    header = handle.readline()  # the same header line in every part
                    if group == min(by_group):
                        out.write(header)
                    shutil.copyfileobj(handle, out)
                with (part_dir / REJECTED_JSONL).open("rb") as handle:
                    shutil.copyfileobj(handle, out_jsonl)
                rejects.reasons.update(part["rejected"]["reasons"])
                rejects.columns.update(part["rejected"]["columns"])
                for sample in part["rejected"]["samples"]:
                    if len(rejects.samples) < SAMPLE_REJECTS:
                        rejects.samples.append(tuple(sample))
                for partials in part["files"]:
                    for p in partials:
                        rows_read += p["rows_read"]
                        unseen.update(p["unseen"])
                        nonfinite.update(p.get("nonfinite", {}))
                        for split in SPLITS:
                            split_rows[split] += p["split_rows"][split]
                            for name, s in _stats_from_state(p["stats"])[split].items():
                                stats[split][name].merge(s)
                            for f in p["shards"][split]:
                                if doc["shard_root"]:
                                    shards[split].append(f)
                                else:  # copied in: the merge step stages them anyway
                                    target = scratch / split / Path(f).name
                                    target.parent.mkdir(parents=True, exist_ok=True)
                                    shutil.copyfile(part_dir / f, target)
                                    shards[split].append(str(target))
        _check_counts(source, rows_read, split_rows, rejects)
        stats_doc = finish.finish_dataset(
            schema, stats, rows_read, split_rows, rejects, unseen, nonfinite, problems,
            inferred=doc["inferred"], max_vocabulary=doc["max_vocabulary"],
            reject_unseen=plan.reject_unseen, max_rejected_fraction=max_rejected_fraction,
            max_missing_fraction=max_missing_fraction)
        finish.check_splits(split_rows, bool(doc["key_column"]))
        stats_doc["task"] = doc.get("task") or {"task": schema.task,
                                                "reason": schema.task_reason}
        if doc["shard_root"]:
            shard_store.write_manifest(scratch, doc["shard_root"], shards)
        (scratch / "schema.json").write_text(schema.to_json(), encoding="utf-8")
        stats_doc = finish.strict_json(stats_doc)
        (scratch / STATS_FILE).write_text(json.dumps(stats_doc, indent=2, allow_nan=False),
                                          encoding="utf-8")
        result = PrepareResult(
            rows_read=rows_read, split_rows=split_rows, rejected_rows=rejects.count,
            rejected_reasons=dict(rejects.reasons), schema=schema, problems=problems,
            stats=stats_doc, shards={s: len(shards[s]) for s in SPLITS},
        )
        from gkeflow.components.prepare.report import render_report

        (scratch / REPORT_FILE).write_text(render_report(source, result, rejects.samples),
                                           encoding="utf-8")
    return result


def _check_counts(source: str, rows_read: int, split_rows: dict, rejects) -> None:
    if rows_read != sum(split_rows.values()) + rejects.count:
        raise RuntimeError(f"row accounting is off: read {rows_read}, wrote {split_rows} "
                           f"and {rejects.count} rejected")
    if rows_read == 0:
        raise DataError(f"data has a header but no data rows: {source}")
    if sum(split_rows.values()) == 0:
        raise DataError(f"no usable rows in {source}: every row was rejected "
                        f"({finish.reason_summary(rejects)})\n{finish.reject_samples(rejects)}")
