"""`sweep.engine: ray`: settings, the schedulers handed to Tune, the reports of stopped
trials, and a GKE or Vertex AI sweep refused before anything is compiled."""

from __future__ import annotations

import json

import pytest

from gkeflow.components import yamlio
from gkeflow.components.sweep.logic import parse_outcomes, trial_table
from gkeflow.components.sweep.ray_tune import (
    TuneSettings,
    make_scheduler,
    stopped_report,
    trial_params,
)
from gkeflow.pipelines.compute.profiles import ComputeError
from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline
from gkeflow.pipelines.definitions.sweep_trials import uses_ray
from gkeflow.pipelines.settings.sweep_config import SweepConfig

SPACE = {"learning_rate": {"type": "choice", "values": [0.01, 0.001]}}


def test_settings_are_checked_in_one_line():
    with pytest.raises(ValueError, match="scheduler must be one of asha, median, none"):
        TuneSettings(scheduler="hyperband")
    with pytest.raises(ValueError, match="reduction_factor >= 2"):
        TuneSettings(reduction_factor=1)
    assert TuneSettings(direction="minimize").mode == "min"


def test_asha_never_stops_a_trial_at_its_last_epoch():
    """A trial that trained every epoch must go on to export its model and report."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, MedianStoppingRule

    asha = make_scheduler(TuneSettings(grace_epochs=2), max_epochs=6)
    assert isinstance(asha, ASHAScheduler)
    assert asha._max_t == 7 and asha._stop_last_trials is False
    assert isinstance(make_scheduler(TuneSettings(scheduler="median"), 6), MedianStoppingRule)
    assert isinstance(make_scheduler(TuneSettings(scheduler="none"), 6), FIFOScheduler)


def test_trial_params_put_the_searched_values_over_the_fixed_ones():
    params = trial_params({"epochs": 5, "hidden_units": "64,32", "learning_rate": 0.01},
                          {"trial_id": "trial-001", "learning_rate": 0.3,
                           "hidden_units": "16"})
    assert params == {"epochs": 5, "hidden_units": (16,), "learning_rate": 0.3}


def test_trial_params_keep_each_fields_type_whatever_the_search_handed():
    # a search algorithm or a JSON round trip gives 32.0 for an integer, lists for layers
    params = trial_params({"epochs": 5.0, "dropout": 0, "model_type": "gbdt"},
                          {"trial_id": "t", "batch_size": 32.0, "hidden_units": [64.0, 32],
                           "learning_rate": 1, "gbdt_max_depth": 8.0, "require_gpu": True})
    assert params == {"epochs": 5, "dropout": 0.0, "model_type": "gbdt", "batch_size": 32,
                      "hidden_units": (64, 32), "learning_rate": 1.0, "gbdt_max_depth": 8,
                      "require_gpu": True}
    assert [type(params[k]) for k in ("epochs", "batch_size", "dropout", "learning_rate")] \
        == [int, int, float, float]
    with pytest.raises(ValueError, match="batch_size must be a whole number"):
        trial_params({}, {"batch_size": 32.5})


def test_a_stopped_trial_is_listed_with_its_epochs_but_never_selected():
    reports = [stopped_report("trial-001", "eval_accuracy", {"epoch": 2, "eval_accuracy": 0.9}),
               json.dumps({"trial_id": "trial-000", "status": "succeeded", "model_uri": "m",
                           "metrics": {"eval_accuracy": 0.8}})]
    trials = [{"trial_id": "trial-000", "learning_rate": 0.01},
              {"trial_id": "trial-001", "learning_rate": 0.001}]
    outcomes = parse_outcomes(trials, reports)
    rows = trial_table(outcomes, "eval_accuracy", "maximize")
    assert [r["trial_id"] for r in rows] == ["trial-000", "trial-001"]
    assert rows[1]["status"] == "stopped"
    assert rows[1]["error"] == "stopped early by the scheduler after 2 epoch(s)"


@pytest.mark.parametrize("error, shown", [
    # a Ray trial's own report: the exception line, not the message's last line
    ("ValueError: learning rate too high\nsecond line of detail\nthird",
     "ValueError: learning rate too high"),
    # a step's log: the traceback's exception line, after the frames
    ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
     "RuntimeError: out of memory", "RuntimeError: out of memory"),
    ("something went wrong\nmore", "something went wrong"),
])
def test_a_failed_trial_is_one_line_naming_its_exception(error, shown):
    reports = [json.dumps({"trial_id": "trial-000", "status": "failed", "error": error})]
    outcomes = parse_outcomes([{"trial_id": "trial-000", "learning_rate": 0.1}], reports)
    (row,) = trial_table(outcomes, "eval_accuracy", "maximize")
    assert row["status"] == "failed" and row["error"] == shown


def test_engine_ray_runs_locally_and_on_gke_and_is_refused_on_vertex():
    sweep = SweepConfig(engine="ray", parameters=SPACE)
    assert uses_ray("local", "ray") and uses_ray("gke", "ray") and not uses_ray("vertex", "ray")
    with pytest.raises(ComputeError, match="a vertex sweep cannot use it: set sweep.engine "
                                           "vizier"):
        build_sweep_pipeline("vertex", sweep=sweep)


def test_the_sweep_config_takes_the_scheduler_and_grace_epochs():
    sweep = SweepConfig(engine="ray", scheduler="median", grace_epochs=3, parameters=SPACE)
    assert (sweep.scheduler, sweep.grace_epochs) == ("median", 3)
    with pytest.raises(ValueError):
        SweepConfig(engine="ray", scheduler="pbt", parameters=SPACE)


def test_bayesian_search_is_for_the_ray_engine_and_its_trials_are_ids_only():
    from gkeflow.pipelines.settings.sweep_config import expand_trials, parse_sweep

    for engine in ("kfp", "vizier"):
        with pytest.raises(ValueError, match=f"which engine {engine} cannot .* set engine: "
                                             "ray, or algorithm: random"):
            parse_sweep({"engine": engine, "algorithm": "bayesian", "parameters": SPACE})
    sweep = parse_sweep({"engine": "ray", "algorithm": "bayesian", "max_trials": 2,
                         "parameters": SPACE})
    assert expand_trials(sweep) == [{"trial_id": "trial-000"}, {"trial_id": "trial-001"}]
    with pytest.raises(ValueError, match="search must be one of fixed, bayesian"):
        TuneSettings(search="hyperopt")


def test_the_search_space_becomes_tune_domains_with_the_grids_bounds():
    from ray.tune.search.sample import Categorical, Float, Integer

    from gkeflow.components.sweep.ray_search import trial_id_of, tune_domains

    domains = tune_domains({"learning_rate": {"type": "loguniform", "min": 1e-4, "max": 0.1},
                            "dropout": {"type": "uniform", "min": 0.0, "max": 0.5},
                            "epochs": {"type": "int", "min": 2, "max": 8, "step": 2},
                            "hidden_units": {"type": "choice", "values": ["64,32", "16"]}})
    assert isinstance(domains["learning_rate"], Float)
    assert (domains["learning_rate"].lower, domains["learning_rate"].upper) == (1e-4, 0.1)
    assert isinstance(domains["epochs"], Integer)
    assert {domains["epochs"].sample() for _ in range(200)} == {2, 4, 6, 8}, "upper included"
    assert isinstance(domains["hidden_units"], Categorical)
    assert trial_id_of("ae101_00007") == "trial-007" and trial_id_of("301e1c65") == \
        "trial-301e1c65"


def test_a_bayesian_ray_sweep_compiles_with_its_search_space(tmp_path):
    from kfp import compiler

    from gkeflow.pipelines.settings.sweep_config import parse_sweep

    sweep = parse_sweep({"engine": "ray", "algorithm": "bayesian", "max_trials": 5,
                         "seed": 3, "parameters": SPACE})
    for target in ("local", "gke"):
        path = tmp_path / f"{target}.yaml"
        compiler.Compiler().compile(build_sweep_pipeline(target, sweep=sweep), str(path))

        spec = next(yamlio.load_all(path.read_text()))
        task = spec["root"]["dag"]["tasks"]["tune-on-kuberay" if target == "gke"
                                            else "tune-with-ray"]
        values = {k: v["runtimeValue"]["constant"] for k, v in
                  task["inputs"]["parameters"].items() if "runtimeValue" in v}
        assert values["search"] == "bayesian" and values["seed"] == 3
        assert json.loads(values["search_space"]) == {
            "learning_rate": {"type": "choice", "values": [0.01, 0.001]}}


def test_a_ray_steps_parameters_split_into_settings_and_fixed_values(tmp_path):
    from gkeflow.components.prepare.schema import ColumnSchema, Schema
    from gkeflow.components.sweep.ray_inputs import ray_sweep_inputs

    def schema(task: str) -> str:
        path = tmp_path / f"{task}.json"
        columns = [ColumnSchema("x", "numeric", "feature", False),
                   ColumnSchema("y", "numeric" if task == "regression" else "categorical",
                                "label", False)]
        path.write_text(Schema("y", [] if task == "regression" else ["a", "b"], columns,
                               task).to_json())
        return str(path)

    metric, direction, settings, fixed = ray_sweep_inputs(
        schema("classification"), "eval_accuracy", "maximize", scheduler="median", seed=3,
        epochs=4, backend="jax")
    assert (metric, direction) == ("eval_accuracy", "maximize")
    assert settings == {"metric": "eval_accuracy", "direction": "maximize",
                        "scheduler": "median", "seed": 3}
    assert fixed == {"epochs": 4, "backend": "jax"}
    metric, direction, settings, _ = ray_sweep_inputs(schema("regression"), "eval_accuracy",
                                                      "maximize")
    assert (metric, direction) == ("eval_rmse", "minimize") == (settings["metric"],
                                                                settings["direction"])
    with pytest.raises(TypeError, match="not a Ray sweep parameter: learning_rat"):
        ray_sweep_inputs(schema("classification"), "eval_accuracy", "maximize",
                         learning_rat=0.1)
