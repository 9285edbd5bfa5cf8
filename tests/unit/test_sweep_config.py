"""The sweep: section: validation with actionable errors, deterministic trial expansion."""

from __future__ import annotations

import pytest

from gkeflow.pipelines.settings.config import ConfigError, load_config
from gkeflow.pipelines.settings.sweep_config import (
    SweepError,
    default_sweep,
    expand_trials,
    parse_sweep,
    sweep_from_flags,
)


def _sweep(**changes):
    raw = {"parameters": {"learning_rate": {"type": "loguniform", "min": 1e-4, "max": 1e-1},
                          "batch_size": {"type": "choice", "values": [16, 32, 64]}}}
    raw.update(changes)
    return parse_sweep(raw)


def test_random_search_is_seeded_and_typed():
    first, again = expand_trials(_sweep(max_trials=6)), expand_trials(_sweep(max_trials=6))
    assert first == again
    assert [t["trial_id"] for t in first] == [f"trial-{i:03d}" for i in range(6)]
    assert all(1e-4 <= t["learning_rate"] <= 1e-1 for t in first)
    assert all(type(t["batch_size"]) is int and t["batch_size"] in (16, 32, 64) for t in first)
    assert set(first[0]) == {"trial_id", "learning_rate", "batch_size"}
    assert expand_trials(_sweep(max_trials=6, seed=1)) != first
    # loguniform spreads over decades: not all draws in the top decade
    assert min(t["learning_rate"] for t in expand_trials(_sweep(max_trials=20))) < 1e-2


def test_grid_is_the_product_in_declaration_order():
    sweep = parse_sweep({"algorithm": "grid", "max_trials": 6, "parameters": {
        "model_type": {"type": "choice", "values": ["mlp", "wide_deep"]},
        "epochs": {"type": "int", "min": 2, "max": 6, "step": 2}}})
    trials = expand_trials(sweep)
    assert [(t["model_type"], t["epochs"]) for t in trials] == [
        ("mlp", 2), ("mlp", 4), ("mlp", 6), ("wide_deep", 2), ("wide_deep", 4),
        ("wide_deep", 6)]
    assert sweep.trial_count() == 6


@pytest.mark.parametrize("raw, message", [
    ({"algorithm": "grid"}, "parameters.learning_rate: a loguniform range has no grid"),
    ({"algorithm": "grid", "max_trials": 2,
      "parameters": {"batch_size": {"type": "choice", "values": [8, 16, 32]}}},
     "the grid has 3 points but max_trials is 2"),
    ({"parameters": {"momentum": {"type": "uniform", "min": 0, "max": 1}}},
     "parameters.momentum: not a tunable hyperparameter; tunable: learning_rate"),
    ({"parameters": {"learning_rate": {"type": "loguniform", "min": 0, "max": 1}}},
     "must be > 0 for a loguniform range"),
    ({"parameters": {"learning_rate": {"type": "uniform", "min": 0.1, "max": 0.01}}},
     "min (0.1) must be below max (0.01)"),
    ({"parameters": {"batch_size": {"type": "uniform", "min": 8, "max": 64}}},
     "uniform gives real numbers but batch_size is an integer >= 1; use type: int or choice"),
    ({"parameters": {"batch_size": {"type": "choice", "values": [0, 32]}}},
     "parameters.batch_size: not valid; batch_size must be an integer >= 1"),
    ({"parameters": {"hidden_units": {"type": "choice", "values": ["64,x"]}}},
     "comma-separated positive layer sizes"),
    ({"parameters": {"learning_rate": {"type": "normal", "mean": 0.01}}},
     "sweep.parameters.learning_rate"),
    ({"metric": "f1"}, "metric: 'f1' is not measured by training; choose eval_accuracy or"),
    ({"parameters": {}}, "parameters: name at least one hyperparameter"),
    ({"max_trials": 0}, "sweep.max_trials"),
    ({"paralel_trials": 2}, "sweep.paralel_trials: unknown key (did you mean "
                            "'parallel_trials'?); remove or rename it"),
])
def test_invalid_sweeps_name_the_key_and_the_fix(raw, message):
    base = {"parameters": {"learning_rate": {"type": "loguniform", "min": 1e-4,
                                             "max": 1e-1}}}
    with pytest.raises(SweepError) as info:
        parse_sweep({**base, **raw})
    assert message in str(info.value)


def test_metric_aliases_direction_and_parallel_cap():
    assert _sweep(metric="loss").direction == "minimize"
    assert _sweep(metric="loss").metric == "eval_loss"
    assert _sweep(metric="accuracy", direction="minimize").direction == "minimize"
    assert _sweep(max_trials=3, parallel_trials=8).parallel_trials == 3


def test_sweep_section_of_gkeflow_yaml(tmp_path):
    path = tmp_path / "gkeflow.yaml"
    path.write_text("sweep:\n  algorithm: grid\n  max_trials: 4\n  parallel_trials: 2\n"
                    "  parameters:\n    learning_rate: {type: choice, values: [0.001, 0.1]}\n"
                    "    batch_size: {type: choice, values: [16, 64]}\n")
    sweep = load_config(path).sweep
    assert [t["learning_rate"] for t in expand_trials(sweep)] == [0.001, 0.001, 0.1, 0.1]
    path.write_text("sweep:\n  parameters:\n    learning_rate: {type: loguniform, min: -1, "
                    "max: 1}\n")
    with pytest.raises(ConfigError, match=r"gkeflow.yaml: sweep.parameters.learning_rate"):
        load_config(path)


def test_command_line_specs_replace_the_files_parameters():
    sweep = sweep_from_flags(default_sweep(), (
        "learning_rate=loguniform:0.0001:0.1", "batch_size=16,64",
        "hidden_units=64,32;128", "epochs=int:2:8:2"), algorithm="random", max_trials=5,
        parallel_trials=3, metric="eval_loss", seed=7)
    assert sweep.parameters["batch_size"].values == [16, 64]
    assert sweep.parameters["hidden_units"].values == ["64,32", "128"]
    assert sweep.parameters["epochs"].grid() == [2, 4, 6, 8]
    assert (sweep.max_trials, sweep.parallel_trials, sweep.seed) == (5, 3, 7)
    assert sweep.direction == "minimize"
    assert len(expand_trials(sweep)) == 5
    for bad, message in [("learning_rate", "expected NAME=SPEC"),
                         ("learning_rate=loguniform:a:b", "bounds must be numbers"),
                         ("batch_size=16,many", "'many' is not a number"),
                         ("epochs=int:1", "expected int:MIN:MAX[:STEP]")]:
        with pytest.raises(SweepError, match=message.replace("[", r"\[").replace("]", r"\]")):
            sweep_from_flags(None, (bad,))


def test_default_sweep_is_what_compiles():
    sweep = default_sweep()
    assert sweep.trial_count() == 4 and sweep.parallel_trials == 2
    assert len({t["learning_rate"] for t in expand_trials(sweep)}) == 4


def test_the_trees_settings_are_tunable_with_train_model_s_bounds():
    from gkeflow.pipelines.settings.sweep_config import family_problem

    sweep = parse_sweep({"parameters": {"gbdt_max_depth": {"type": "int", "min": 2, "max": 8},
                                        "gbdt_subsample": {"type": "uniform", "min": 0.5,
                                                           "max": 1.0}}})
    assert family_problem(sweep, "gbdt") == ""
    assert family_problem(sweep, "mlp").startswith(
        "the sweep tunes gbdt_max_depth, gbdt_subsample, which only gradient-boosted trees "
        "use, but trains mlp: add --model-type gbdt")
    both = parse_sweep({"parameters": {
        "gbdt_max_depth": {"type": "int", "min": 2, "max": 8},
        "model_type": {"type": "choice", "values": ["gbdt", "mlp"]}}})
    assert "trains gbdt, mlp" in family_problem(both, "gbdt")
    for bad in ({"gbdt_max_depth": {"type": "int", "min": 0, "max": 4}},
                {"gbdt_subsample": {"type": "uniform", "min": 0.5, "max": 1.5}},
                {"gbdt_rounds": {"type": "uniform", "min": 10, "max": 20}}):
        with pytest.raises(SweepError, match=f"parameters.{next(iter(bad))}"):
            parse_sweep({"parameters": bad})


def test_a_vizier_trial_takes_the_trees_settings_as_flags():
    from gkeflow.components.sweep.trial import parse_args

    args = parse_args(["--dataset", "d", "--schema", "s", "--gbdt_max_depth", "3",
                       "--gbdt_subsample", "0.8"])
    assert (args.gbdt_max_depth, args.gbdt_subsample) == (3, 0.8)
    assert args.gbdt_rounds == 2000  # not searched: train-model's default


def test_a_yaml_list_of_plain_values_is_a_comma_separated_parameter(tmp_path):
    """`candidates: [gbdt, linear]` in gkeflow.yaml's parameters (and a schedule's) is the
    text the pipeline parameter takes; a list of mappings is still refused."""
    path = tmp_path / "gkeflow.yaml"
    path.write_text("parameters:\n  prod:\n    candidates: [gbdt, linear]\n"
                    "    hidden_units: [64, 32]\n")
    config = load_config(path)
    assert config.parameters["prod"] == {"candidates": "gbdt,linear", "hidden_units": "64,32"}
    path.write_text("parameters:\n  prod:\n    candidates: [{a: 1}]\n")
    with pytest.raises(ConfigError, match="parameters.prod.candidates"):
        load_config(path)
