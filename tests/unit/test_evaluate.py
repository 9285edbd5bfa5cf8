"""evaluate: metrics against hand-computed values, the blessing, the champion, the model card."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from gkeflow.components import yamlio
from gkeflow.components.evaluate.accumulate import compute_metrics
from gkeflow.components.evaluate.logic import (
    choose_slice_columns,
    evaluate,
    slice_metrics,
)
from gkeflow.components.evaluate.metrics import (
    Curve,
    MetricsError,
    average_precision,
    downsample_curve,
    expected_calibration_error,
    positive_class_roc,
    roc_auc,
    roc_curve,
)
from gkeflow.components.evaluate.model_card import render_model_card
from gkeflow.components.evaluate.policy import (
    BlessingPolicy,
    Champion,
    EvaluationError,
    decide,
    parse_thresholds,
)
from gkeflow.components.register.local_registry import LocalRegistry

NAME = "penguins-classifier"

# Binary, 4 examples: true neg neg pos pos; P(pos) .15 .65 .35 .75.
BIN_TRUE = np.array([0, 0, 1, 1])
BIN_POS = np.array([0.15, 0.65, 0.35, 0.75])
BIN_PROBS = np.c_[1 - BIN_POS, BIN_POS]

# Three classes, 4 examples; predictions (argmax) a b c a.
MC_TRUE = np.array([0, 1, 2, 2])
MC_PROBS = np.array([[.7, .2, .1], [.3, .5, .2], [.2, .3, .5], [.65, .2, .15]])


def test_binary_metrics_match_hand_computed_values():
    m = compute_metrics(BIN_TRUE, BIN_PROBS, ["neg", "pos"])
    # predictions: neg pos neg pos -> 2 of 4 right, one error each way.
    assert m.accuracy == 0.5
    assert m.confusion_matrix == [[1, 1], [1, 1]]
    assert m.precision_macro == m.recall_macro == m.f1_macro == 0.5
    # Pairs (pos, neg): .35>.15, .35<.65, .75>.15, .75>.65 -> 3/4.
    assert m.roc_auc == pytest.approx(0.75)
    # Ranked: .75 pos (P=1, R=.5), .65 neg, .35 pos (P=2/3, R=1) -> .5*1 + .5*2/3.
    assert m.pr_auc == pytest.approx(0.5 + 0.5 * 2 / 3)
    assert m.log_loss == pytest.approx(-np.mean(np.log([0.85, 0.35, 0.35, 0.75])))
    # Confidence .85 (right), .65 (wrong), .65 (wrong), .75 (right) in bins 8, 6, 6, 7.
    assert m.ece == pytest.approx((0.15 + 2 * 0.65 + 0.25) / 4)
    curve = roc_curve(BIN_TRUE == 1, BIN_POS)
    assert curve.fpr.tolist() == [0, 0, 0.5, 0.5, 1]
    assert curve.tpr.tolist() == [0, 0.5, 0.5, 1, 1]
    assert curve.thresholds.tolist() == [1.0, 0.75, 0.65, 0.35, 0.15]


def test_binary_auc_is_of_the_chosen_positive_class():
    m = compute_metrics(BIN_TRUE, BIN_PROBS, ["neg", "pos"], positive_class="neg")
    # AP of "neg": ranked by P(neg) .85 neg, .65 pos, .35 neg, .25 pos -> .5*1 + .5*2/3.
    assert m.roc_auc == pytest.approx(0.75) and m.pr_auc == pytest.approx(0.5 + 1 / 3)
    with pytest.raises(MetricsError, match="positive_class 'maybe' is not in"):
        compute_metrics(BIN_TRUE, BIN_PROBS, ["neg", "pos"], positive_class="maybe")


def test_multiclass_metrics_match_hand_computed_values():
    m = compute_metrics(MC_TRUE, MC_PROBS, ["a", "b", "c"])
    assert m.accuracy == 0.75
    assert m.confusion_matrix == [[1, 0, 0], [0, 1, 0], [1, 0, 1]]
    a, b, c = (m.per_class[k] for k in "abc")
    assert (a.precision, a.recall, a.f1) == (0.5, 1.0, pytest.approx(2 / 3))
    assert (b.precision, b.recall, b.f1) == (1.0, 1.0, 1.0)
    assert (c.precision, c.recall, c.f1) == (1.0, 0.5, pytest.approx(2 / 3))
    assert m.precision_macro == pytest.approx(2.5 / 3) and m.recall_macro == pytest.approx(2.5 / 3)
    assert m.f1_macro == pytest.approx(7 / 9)
    # One-vs-rest: a and b rank their positive first (AUC 1, AP 1); c has positives .5 and
    # .15 against negatives .1 and .2 -> AUC 3/4, AP .5*1 + .5*2/3.
    assert (a.roc_auc, b.roc_auc, c.roc_auc) == (1.0, 1.0, pytest.approx(0.75))
    assert c.pr_auc == pytest.approx(0.5 + 1 / 3)
    assert m.roc_auc == pytest.approx(2.75 / 3)
    assert m.pr_auc == pytest.approx((2 + 0.5 + 1 / 3) / 3)
    assert m.log_loss == pytest.approx(-np.mean(np.log([.7, .5, .5, .15])))
    # Confidence .7 (right), .5 (right), .5 (right), .65 (wrong).
    assert m.ece == pytest.approx((0.3 + 2 * 0.5 + 0.65) / 4)
    scalars = m.scalars()
    assert scalars["roc_auc_c"] == pytest.approx(0.75) and scalars["f1_b"] == 1.0
    assert scalars["test_examples"] == 4.0


def test_ties_count_half_and_undefined_aucs_are_none_not_nan():
    assert roc_auc(np.array([True, False]), np.array([0.5, 0.5])) == 0.5
    assert average_precision(np.array([True, False]), np.array([0.5, 0.5])) == 0.5
    assert roc_auc(np.array([True, True]), np.array([0.2, 0.9])) is None
    # Class "c" never occurs: its AUCs are undefined, the macro averages skip it.
    m = compute_metrics(np.array([0, 1, 0]), np.array([[.8, .1, .1], [.3, .6, .1],
                                                       [.4, .5, .1]]), ["a", "b", "c"])
    assert m.per_class["c"].roc_auc is None and m.per_class["c"].pr_auc is None
    assert m.per_class["c"].precision == 0.0 and m.per_class["c"].f1 == 0.0
    assert m.roc_auc == pytest.approx(1.0)
    assert all(math.isfinite(v) for v in m.scalars().values())
    assert "roc_auc_c" not in m.scalars()


def test_calibration_error_of_a_perfectly_calibrated_bin_is_zero():
    # Ten examples at confidence .8, eight right: accuracy equals confidence.
    probs = np.tile([0.8, 0.2], (10, 1))
    true = np.array([0] * 8 + [1] * 2)
    assert expected_calibration_error(true, probs) == pytest.approx(0.0, abs=1e-12)


def test_invalid_inputs_are_clear_errors():
    with pytest.raises(MetricsError, match="label-count mismatch: the model outputs 3 class "
                                           "probabilities but the label vocabulary has 2"):
        compute_metrics(MC_TRUE, MC_PROBS, ["a", "b"])
    with pytest.raises(MetricsError, match="3 true labels but 4 predictions"):
        compute_metrics(MC_TRUE[:3], MC_PROBS, ["a", "b", "c"])
    with pytest.raises(MetricsError, match="empty"):
        compute_metrics(np.array([], int), np.zeros((0, 2)), ["a", "b"])
    with pytest.raises(MetricsError, match="non-finite"):
        compute_metrics(BIN_TRUE, np.where(BIN_PROBS > .8, np.nan, BIN_PROBS), ["n", "p"])


def test_roc_curve_is_downsampled_finite_and_keeps_its_ends():
    rng = np.random.default_rng(0)
    true = rng.integers(0, 2, 5000)
    scores = np.clip(true * 0.3 + rng.random(5000) * 0.7, 0, 1)
    scores[0] = 1.0  # a saturated probability must not produce an infinite threshold
    probs = np.c_[1 - scores, scores]
    label, curve = positive_class_roc(true, probs, ["no", "yes"])
    assert label == "yes"
    assert 100 < len(curve) <= 200
    assert (curve.fpr[0], curve.tpr[0]) == (0, 0) and (curve.fpr[-1], curve.tpr[-1]) == (1, 1)
    assert np.all(np.diff(curve.fpr) >= 0) and np.all(np.diff(curve.tpr) >= 0)
    assert np.all(np.diff(curve.thresholds) < 0)
    assert np.all(np.isfinite(curve.thresholds)) and curve.thresholds[0] > 1.0
    short = Curve(np.array([0.0, 1.0]), np.array([0.0, 1.0]), np.array([1.0, 0.0]))
    assert downsample_curve(short) is short


# --- the blessing ---------------------------------------------------------------------------


def _metric_set(accuracy: float, log_loss: float = 0.5):
    m = compute_metrics(BIN_TRUE, BIN_PROBS, ["neg", "pos"])
    m.accuracy, m.log_loss = accuracy, log_loss
    return m


def _champion(metrics, not_comparable=""):
    return Champion(NAME, 3, "/models/3", ("champion",), metrics, not_comparable)


def test_decision_thresholds_alone_without_champion():
    policy = BlessingPolicy.from_parameters(0.8, "log_loss<=0.4")
    decision = decide(_metric_set(0.9, log_loss=0.3), None, policy)
    assert decision.blessed
    assert decision.reasons == [
        "PASS accuracy 0.9000 >= min_accuracy 0.8",
        "PASS log_loss 0.3000 meets log_loss<=0.4",
        "PASS no champion registered: thresholds alone decide",
    ]
    decision = decide(_metric_set(0.9, log_loss=0.45), None, policy)
    assert not decision.blessed and "FAIL log_loss 0.4500 misses log_loss<=0.4" in \
        decision.reasons
    assert not decide(_metric_set(0.7), None, policy).blessed


def test_decision_against_champion_better_worse_within_tolerance():
    policy = BlessingPolicy(min_accuracy=0.5, regression_tolerance=0.02)
    better = decide(_metric_set(0.95), _champion(_metric_set(0.90)), policy)
    assert better.blessed and "is no worse" in better.reasons[-1]
    within = decide(_metric_set(0.89), _champion(_metric_set(0.90)), policy)
    assert within.blessed and "regresses by 0.0100, within the tolerance 0.02" in \
        within.reasons[-1]
    worse = decide(_metric_set(0.85), _champion(_metric_set(0.90)), policy)
    assert not worse.blessed
    assert worse.reasons[-1] == (
        "FAIL accuracy 0.8500 vs champion penguins-classifier v3 (champion) 0.9000 "
        "(higher is better): regresses by 0.0500, beyond the tolerance 0.02")


def test_decision_lower_is_better_metric_and_incomparable_champion():
    policy = BlessingPolicy(min_accuracy=0.0, comparison_metric="log_loss")
    assert decide(_metric_set(0.9, 0.30), _champion(_metric_set(0.9, 0.35)), policy).blessed
    assert not decide(_metric_set(0.9, 0.40), _champion(_metric_set(0.9, 0.35)), policy).blessed
    incomparable = decide(_metric_set(0.9), _champion(None, "it predicts labels ['x']"), policy)
    assert incomparable.blessed and "is not comparable" in incomparable.reasons[-1]


def test_policy_and_threshold_errors_are_clear():
    assert [str(t) for t in parse_thresholds(" f1_macro>=0.8 , ece<=0.1")] == \
        ["f1_macro>=0.8", "ece<=0.1"]
    with pytest.raises(EvaluationError, match="unknown metric 'f2'"):
        parse_thresholds("f2>=0.8")
    with pytest.raises(EvaluationError, match="invalid threshold 'accuracy>0.8'"):
        parse_thresholds("accuracy>0.8")
    with pytest.raises(EvaluationError, match="unknown comparison_metric 'auc'"):
        BlessingPolicy(comparison_metric="auc")
    with pytest.raises(EvaluationError, match="regression_tolerance"):
        BlessingPolicy(regression_tolerance=-0.1)
    with pytest.raises(EvaluationError, match="min_accuracy"):
        BlessingPolicy(min_accuracy=1.5)


# --- the real models --------------------------------------------------------------------------


def _registry_with(tmp_path, *model_dirs, champion: int = 0):
    uri = f"sqlite:///{tmp_path / 'registry.db'}"
    registry = LocalRegistry(uri)
    for i, model_dir in enumerate(model_dirs):
        registry.register(NAME, str(model_dir), {}, run_id=f"run-{i}")
    if champion:
        registry.set_alias(NAME, champion, "champion")
    return uri


def _evaluate(prepared_penguins, model_dir, **kwargs):
    dataset_dir, prepared = prepared_penguins
    return evaluate(dataset_dir, prepared.schema, model_dir, **kwargs)


def test_evaluate_real_model_without_champion(prepared_penguins, trained_penguins, tmp_path):
    result = _evaluate(prepared_penguins, trained_penguins[0], min_accuracy=0.8,
                       model_name=NAME, registry_uri=_registry_with(tmp_path))
    assert result.champion is None and result.passed
    assert result.metrics.examples == prepared_penguins[1].split_rows["test"]
    assert int(np.sum(result.metrics.confusion_matrix)) == result.metrics.examples
    assert result.metrics.accuracy > 0.85 and result.metrics.roc_auc > 0.9
    # Slices: every categorical feature by default; the slices partition the test split.
    assert {s.column for s in result.slices} == {"island", "sex"}
    assert sum(s.examples for s in result.slices if s.column == "island") == \
        result.metrics.examples
    assert result.scalar_metrics()["slice_island_Biscoe_accuracy"] == next(
        s.accuracy for s in result.slices if s.value == "Biscoe")
    evidence = json.loads(result.to_json())
    assert evidence["blessed"] is True and evidence["champion"] is None
    assert evidence["data"]["rows"]["test"] == result.metrics.examples
    card = render_model_card(result)
    assert card.startswith(f"# Model card: {NAME}\n\n## Decision: BLESSED")
    assert "Champion: none registered." in card and "| **Gentoo** |" in card
    assert "| island | Biscoe |" in card


def test_champion_worse_blesses_challenger(prepared_penguins, trained_penguins, weak_penguins,
                                           tmp_path):
    # Version 1 is weak but carries the champion alias; version 2 (latest) is ignored.
    uri = _registry_with(tmp_path, weak_penguins, trained_penguins[0], champion=1)
    result = _evaluate(prepared_penguins, trained_penguins[0], min_accuracy=0.5,
                       model_name=NAME, registry_uri=uri)
    assert result.champion.version == 1 and result.champion.aliases == ("champion",)
    assert result.champion.metrics.accuracy < result.metrics.accuracy
    assert result.passed and "is no worse" in result.decision.reasons[-1]
    assert all(s.champion_accuracy is not None for s in result.slices)
    assert "champion penguins-classifier v1 (champion)" in render_model_card(result)


def test_champion_better_blocks_challenger(prepared_penguins, trained_penguins, weak_penguins,
                                           tmp_path):
    # No alias: the latest version is the champion.
    uri = _registry_with(tmp_path, weak_penguins, trained_penguins[0])
    result = _evaluate(prepared_penguins, weak_penguins, min_accuracy=0.0,
                       model_name=NAME, registry_uri=uri, regression_tolerance=0.01)
    assert result.champion.version == 2 and result.champion.aliases == ()
    assert not result.passed
    assert result.decision.reasons[0].startswith("PASS accuracy")
    assert "beyond the tolerance 0.01" in result.decision.reasons[-1]
    card = render_model_card(result)
    assert "## Decision: NOT BLESSED" in card and "(latest version)" in card


def test_champion_within_tolerance_boundary(prepared_penguins, trained_penguins, weak_penguins,
                                            tmp_path):
    uri = _registry_with(tmp_path, trained_penguins[0], champion=1)
    probe = _evaluate(prepared_penguins, weak_penguins, min_accuracy=0.0, model_name=NAME,
                      registry_uri=uri, comparison_metric="f1_macro")
    gap = probe.champion.metrics.f1_macro - probe.metrics.f1_macro
    assert gap > 0.05
    within = _evaluate(prepared_penguins, weak_penguins, min_accuracy=0.0, model_name=NAME,
                       registry_uri=uri, comparison_metric="f1_macro",
                       regression_tolerance=gap + 1e-4)
    assert within.passed and "within the tolerance" in within.decision.reasons[-1]
    beyond = _evaluate(prepared_penguins, weak_penguins, min_accuracy=0.0, model_name=NAME,
                       registry_uri=uri, comparison_metric="f1_macro",
                       regression_tolerance=gap - 1e-4)
    assert not beyond.passed


def test_unloadable_champion_is_a_clear_error(prepared_penguins, trained_penguins, tmp_path):
    gone = tmp_path / "deleted-model"
    shutil.copytree(trained_penguins[0], gone)
    uri = _registry_with(tmp_path, gone)
    shutil.rmtree(gone)
    with pytest.raises(EvaluationError, match=r"champion penguins-classifier v1 \(latest "
                                              r"version\) cannot be loaded from .*deleted-model"):
        _evaluate(prepared_penguins, trained_penguins[0], model_name=NAME, registry_uri=uri)


def test_champion_uri_with_unsupported_scheme_is_a_clear_error(prepared_penguins,
                                                              trained_penguins, tmp_path):
    uri = _registry_with(tmp_path, "s3://bucket/models/1")
    with pytest.raises(EvaluationError, match="unsupported scheme 's3'"):
        _evaluate(prepared_penguins, trained_penguins[0], model_name=NAME, registry_uri=uri)


def test_slices_partition_rows_and_keep_missing_and_rare_values():
    test = pd.DataFrame({"colour": ["red", "red", None, "blue", "red, dark"],
                         "size": ["s", "m", "s", "m", "s"]})
    true = np.array([0, 1, 0, 1, 0])
    probs = np.array([[.9, .1], [.2, .8], [.4, .6], [.7, .3], [.6, .4]])
    slices = slice_metrics(test, ["colour"], true, probs, champion_probabilities=probs[:, ::-1])
    by_value = {s.value: s for s in slices}
    assert sorted(by_value) == ["(missing)", "blue", "red", "red, dark"]
    assert by_value["red"].examples == 2 and by_value["red"].accuracy == 1.0
    assert by_value["red"].champion_accuracy == 0.0
    assert by_value["(missing)"].accuracy == 0.0 and by_value["blue"].accuracy == 0.0
    assert by_value["(missing)"].log_loss == pytest.approx(-np.log(0.4))
    # Macro F1 over the classes seen in the slice: "blue" has true 1, predicted 0 -> 0.
    assert by_value["blue"].f1_macro == 0.0
    # 40 values of 5 rows each: the 24 first by (count, value) kept, 16 * 5 rows pooled
    many = pd.DataFrame({"v": [f"v{i % 40:02d}" for i in range(200)]})
    pooled = slice_metrics(many, ["v"], np.zeros(200, int), np.tile([.6, .4], (200, 1)))
    assert len(pooled) == 25 and pooled[-1].value == "v23"
    assert next(s.examples for s in pooled if s.value == "(other)") == 200 - 24 * 5


def test_slice_columns_are_checked(prepared_penguins):
    _, prepared = prepared_penguins
    assert choose_slice_columns(prepared.schema, "sex, island,sex") == (["sex", "island"],
                                                                        False)
    assert choose_slice_columns(prepared.schema, "") == (["island", "sex"], True)
    with pytest.raises(EvaluationError, match="'bill_length_mm' is numeric; slices need "
                                              "categorical columns: island, sex"):
        choose_slice_columns(prepared.schema, "bill_length_mm")
    with pytest.raises(EvaluationError, match="'colour' is not in the data"):
        choose_slice_columns(prepared.schema, "colour")
    with pytest.raises(EvaluationError, match="is the label"):
        choose_slice_columns(prepared.schema, "species")


def test_component_body_logs_what_the_kubeflow_ui_renders(prepared_penguins, trained_penguins,
                                                          tmp_path):
    """The component body itself, with real artifacts: the UI's metadata structure."""
    from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Markdown, Metrics, Model

    from gkeflow.components.evaluate.component import evaluate_model

    dataset_dir, _ = prepared_penguins
    outputs = {name: cls(uri=str(tmp_path / name)) for name, cls in [
        ("metrics", Metrics), ("classification_metrics", ClassificationMetrics),
        ("model_card", Markdown), ("evaluation", Artifact), ("plots", HTML)]}
    blessed = evaluate_model.python_func(
        dataset=Dataset(uri=str(dataset_dir)),
        schema=Artifact(uri=str(dataset_dir / "schema.json")),
        model=Model(uri=str(trained_penguins[0])),
        min_accuracy=0.8, model_name=NAME, registry_uri=_registry_with(tmp_path),
        positive_class="Chinstrap", **outputs,
    )
    assert blessed is True
    meta = outputs["classification_metrics"].metadata
    json.dumps(meta, allow_nan=False)  # no inf or NaN anywhere
    matrix = meta["confusionMatrix"]
    assert [a["displayName"] for a in matrix["annotationSpecs"]] == \
        ["Adelie", "Chinstrap", "Gentoo"]
    assert len(matrix["rows"]) == 3 and all(len(r["row"]) == 3 for r in matrix["rows"])
    points = meta["confidenceMetrics"]
    assert 2 <= len(points) <= 200 and meta["rocPositiveClass"] == "Chinstrap"
    assert all(set(p) == {"confidenceThreshold", "recall", "falsePositiveRate"}
               for p in points)
    assert (points[0]["falsePositiveRate"], points[0]["recall"]) == (0, 0)
    assert (points[-1]["falsePositiveRate"], points[-1]["recall"]) == (1, 1)

    scalars = outputs["metrics"].metadata
    json.dumps(scalars, allow_nan=False)
    assert {"accuracy", "precision_macro", "recall_macro", "f1_macro", "log_loss", "roc_auc",
            "pr_auc", "ece", "f1_Gentoo", "roc_auc_Adelie", "passed"} <= set(scalars)
    evidence = json.loads((tmp_path / "evaluation").read_text())
    assert evidence["blessed"] is True and evidence["roc"]["class"] == "Chinstrap"
    assert outputs["evaluation"].metadata["reasons"] == evidence["reasons"]
    assert (tmp_path / "model_card").read_text().startswith(f"# Model card: {NAME}")
    # the plots page holds the confusion matrix itself and the ROC curve, not a pointer
    page = (tmp_path / "plots").read_text()
    counts = [[int(v) for v in row["row"]] for row in matrix["rows"]]
    assert f"{sum(map(sum, counts))} test rows" in page
    for label, row in zip(["Adelie", "Chinstrap", "Gentoo"], counts, strict=True):
        cells = page.split(f"<tr><th>{label}</th>", 1)[1].split("</tr>", 1)[0]
        assert [int(c.split("<br>")[0].split(">")[-1]) for c in cells.split("<td")[1:]] == row
    assert "ROC curve of Chinstrap" in page and "<polyline" in page


# --- the pipeline's gate ----------------------------------------------------------------------


@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_evaluation_is_never_cached_and_gates_registration(tmp_path, target):
    from kfp import compiler

    from gkeflow.pipelines.compute.profiles import ComputeProfile
    from gkeflow.pipelines.definitions.training import build_training_pipeline

    # Even a configuration that asks for caching cannot make evaluation reuse an old champion.
    pipeline = build_training_pipeline(
        target, compute={"evaluate-model": ComputeProfile(cpu="2", memory="8G", caching=True)})
    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    spec = next(yamlio.load_all(path.read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    assert not tasks["evaluate-model"]["cachingOptions"].get("enableCache", False)
    gate = tasks["condition-1"]
    assert gate["triggerPolicy"]["condition"] == \
        "inputs.parameter_values['pipelinechannel--evaluate-model-Output'] == true"
    register = spec["components"]["comp-condition-1"]["dag"]["tasks"]["register-model"]
    assert not register["cachingOptions"].get("enableCache", False)
    params = spec["root"]["inputDefinitions"]["parameters"]
    for name, default in [("comparison_metric", "accuracy"), ("regression_tolerance", 0.01),
                          ("thresholds", ""), ("slice_columns", ""), ("positive_class", "")]:
        assert params[name]["defaultValue"] == default
        assert params[name]["description"]
    evaluate_inputs = tasks["evaluate-model"]["inputs"]["parameters"]
    assert evaluate_inputs["registry_uri"]["componentInputParameter"] == "registry_uri"
    assert evaluate_inputs["model_name"]["componentInputParameter"] == "model_name"


def test_label_count_mismatch_between_model_and_data_is_a_clear_error(prepared_penguins,
                                                                      trained_penguins):
    import dataclasses

    dataset_dir, prepared = prepared_penguins
    schema = dataclasses.replace(prepared.schema, label_vocabulary=["Adelie", "Gentoo"])
    with pytest.raises(EvaluationError, match=r"label-count mismatch: the model was trained "
                                              r"for 3 labels .* but the data's schema has 2"):
        evaluate(dataset_dir, schema, trained_penguins[0])
