"""How ``model_type: auto`` should turn its candidates' eval figures into the served model:
each rule applied to the same candidates' eval and test predictions on the real tables of
``bench/quality.py``, each table over 3 splits (as ``--splits 3``). Prints, per rule, the
geometric mean over tables of the test error against the best of the three default GBDT
baselines (errors averaged over the splits) and the worst tables.

The candidates (gbdt, mlp, linear) are trained once per table and split, as the pipeline's
candidate steps train them (``choose.train_into``); the test predictions are their exported
SavedModels'. About 5 minutes.

    python bench/auto_rules.py
    python bench/auto_rules.py --tables hitters,boston --splits 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quality  # noqa: E402  (bench/quality.py: the tables and their splits)

FAMILIES = ("gbdt", "mlp", "linear")
GBDT_BASELINES = ("xgboost", "lightgbm", "hist_gb")


def candidates(table, split: int, work: Path) -> dict:
    """The table's split: each candidate's eval and test predictions, the truths, and the
    default GBDT baselines' test errors."""
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.choose import (
        MODEL_FOLDER,
        deciding_metric,
        read_candidate,
        train_into,
    )
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import encode_labels, to_model_inputs
    from gkeflow.components.train.logic import TrainParams, train

    with contextlib.redirect_stdout(io.StringIO()):
        result = quality.run_table(table, [], list(GBDT_BASELINES), work, split)
    dataset = work / f"{table.name}-dataset"
    schema = Schema.load(dataset / "schema.json")
    params = TrainParams(model_type="auto", seed=quality.SEED)
    evaluated, tested = (load_split(dataset, s, schema) for s in ("eval", "test"))

    def truth(frame):
        return (frame[schema.label].to_numpy(float) if schema.regression
                else encode_labels(frame, schema))

    found = {}
    for family in FAMILIES:
        with contextlib.redirect_stdout(io.StringIO()):
            train_into(work / family, family, deciding_metric(schema, params.label_transform),
                       train, dataset, schema, params)
        _, trained = read_candidate(work / family)
        if trained is not None:
            found[family] = {"eval": np.asarray(trained.eval_predictions),
                             "test": ExportedModel(work / family / MODEL_FOLDER)
                             .predict_proba(to_model_inputs(tested, schema))}
    return {"regression": schema.regression, "eval_truth": truth(evaluated),
            "test_truth": truth(tested), "candidates": found,
            "baseline": min(quality.primary(result["models"][b]) for b in GBDT_BASELINES)}


def test_error(predictions, truth, regression: bool) -> float:
    predictions = np.asarray(predictions, float)
    if regression:
        return float(np.sqrt(np.mean((predictions.reshape(-1) - truth) ** 2)))
    return float(np.mean(predictions.argmax(1) != truth))


def lowest_then_greedy(case: dict) -> dict[str, float]:
    """The rule before: the best on the eval split, or the greedy ensemble when it beats
    that by MIN_GAIN."""
    from gkeflow.components.train.ensemble import MIN_GAIN, eval_error, greedy_weights

    preds = {n: c["eval"] for n, c in case["candidates"].items()}
    errors = {n: eval_error(p, case["eval_truth"], case["regression"]) for n, p in preds.items()}
    best = min(errors, key=errors.get)
    weights, value = greedy_weights(preds, case["eval_truth"], case["regression"])
    return weights if len(weights) > 1 and value < errors[best] * (1 - MIN_GAIN) else {best: 1.0}


def equal(case: dict) -> dict[str, float]:
    return {n: 1 / len(case["candidates"]) for n in case["candidates"]}


def equal_below(rows: int):
    def rule(case):
        return equal(case) if case["eval_truth"].size < rows else lowest_then_greedy(case)
    return rule


def within_errors(k: float):
    """The equal average of the candidates within ``k`` standard errors of the best (paired
    per-row losses: ``ensemble.indistinguishable``, which serves with ``k`` = 1); else the
    rule before."""
    from gkeflow.components.train.ensemble import indistinguishable

    def rule(case):
        keep = indistinguishable({n: c["eval"] for n, c in case["candidates"].items()},
                                 case["eval_truth"], case["regression"], errors=k)
        return {n: 1 / len(keep) for n in keep} if len(keep) > 1 else lowest_then_greedy(case)
    return rule


RULES = {
    "lowest eval loss, then greedy ensemble": lowest_then_greedy,
    "always the equal average": equal,
    "the equal average below 200 eval rows": equal_below(200),
    "the average within 1 standard error": within_errors(1.0),
    "the average within 2 standard errors": within_errors(2.0),
}


def main(argv=None) -> int:
    from gkeflow.components.train.ensemble import blend

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="", help="comma-separated; default all")
    parser.add_argument("--splits", type=int, default=3)
    args = parser.parse_args(argv)
    tables = [t for t in quality.TABLES if not args.tables or t.name in args.tables.split(",")]
    cases = {}
    with tempfile.TemporaryDirectory(prefix="gkeflow-auto-rules-") as scratch:
        for table in tables:
            for split in range(args.splits):
                work = Path(scratch) / f"{table.name}-{split}"
                work.mkdir()
                cases[table.name, split] = candidates(table, split, work)
                print(f"{table.name} split {split}: trained", flush=True)
    for name, rule in RULES.items():
        per_table: dict[str, list[tuple[float, float]]] = {}
        for (table, _), case in cases.items():
            served = blend({n: c["test"] for n, c in case["candidates"].items()}, rule(case))
            per_table.setdefault(table, []).append(
                (test_error(served, case["test_truth"], case["regression"]), case["baseline"]))
        ratios = {t: np.mean([e for e, _ in v]) / np.mean([b for _, b in v])
                  for t, v in per_table.items()}
        mean = math.exp(np.mean([math.log(r) for r in ratios.values()]))
        worst = ", ".join(f"{t} {r:.3f}" for t, r in sorted(ratios.items(),
                                                            key=lambda kv: -kv[1])[:3])
        print(f"{name}: geomean {mean:.3f}; worst {worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
