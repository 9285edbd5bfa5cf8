"""Settings the docs describe for the training pipeline's steps are pipeline parameters:
`gkeflow run --param` and gkeflow.yaml `parameters:` take them, and the run summary says
when training stopped early."""

from __future__ import annotations

import click
import pytest

from gkeflow.components import yamlio
from gkeflow.pipelines.cli.params import pipeline_params
from gkeflow.pipelines.cli.summary import early_stop_line
from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline
from gkeflow.pipelines.definitions.training import training_pipeline
from gkeflow.pipelines.settings.parameters import ParameterError, check_parameters


@pytest.mark.parametrize("build", [lambda: training_pipeline, build_sweep_pipeline],
                         ids=["training", "sweep"])
def test_run_param_takes_patience_and_rejected_fraction(build):
    values = pipeline_params(build(), ("early_stopping_patience=10",
                                        "max_rejected_fraction=0.3"))
    assert values == {"early_stopping_patience": 10, "max_rejected_fraction": 0.3}


def test_a_mistyped_documented_setting_still_names_the_type():
    with pytest.raises(click.BadParameter, match="early_stopping_patience must be of type"):
        pipeline_params(training_pipeline, ("early_stopping_patience=ten",))


@pytest.mark.parametrize("arguments,message", [
    ({"max_rejected_fraction": 1.5}, "max_rejected_fraction must be between 0 and 1"),
    ({"max_rejected_fraction": -0.1}, "max_rejected_fraction must be between 0 and 1"),
    ({"early_stopping_patience": -1}, "early_stopping_patience must be >= 0"),
])
def test_out_of_range_settings_are_refused_before_any_step(arguments, message):
    with pytest.raises(ParameterError, match=message):
        check_parameters(arguments)


def test_the_compiled_steps_receive_the_settings():
    import tempfile
    from pathlib import Path

    from kfp.compiler import Compiler

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.yaml"
        Compiler().compile(training_pipeline, str(path))
        spec = yamlio.load(path.read_text())
    tasks = spec["root"]["dag"]["tasks"]
    train = tasks["train-model"]["inputs"]["parameters"]["early_stopping_patience"]
    prepare = tasks["prepare-data"]["inputs"]["parameters"]["max_rejected_fraction"]
    assert train == {"componentInputParameter": "early_stopping_patience"}
    assert prepare == {"componentInputParameter": "max_rejected_fraction"}


def test_the_summary_says_when_and_why_training_stopped_early():
    line = early_stop_line({"epochs_run": 12, "best_epoch": 7},
                           {"epochs": 60, "early_stopping_patience": 5})
    assert "stopped early after 12 of 60 epochs" in line
    assert "for 5 epochs since epoch 7" in line
    assert "early_stopping_patience=5" in line


def test_the_summary_says_nothing_when_every_epoch_ran():
    assert early_stop_line({"epochs_run": 20, "best_epoch": 20}, {"epochs": 20}) == ""
    assert early_stop_line({}, {"epochs": 20}) == ""


def _profiles(**fields):
    from dataclasses import replace

    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    return {"train-model": replace(DEFAULT_COMPUTE["train-model"], **fields),
            "prepare-data": DEFAULT_COMPUTE["prepare-data"]}


def test_an_asked_gpu_this_machine_lacks_is_said_at_the_start():
    from gkeflow.pipelines.cli.run_options import local_accelerator_notes

    profiles = _profiles(accelerator="nvidia-l4")
    [note] = local_accelerator_notes(profiles, {}, ("train-model.accelerator=nvidia-l4",),
                                     gpus=0, tpu_chips=0)
    assert "train-model asks for 1 x nvidia-l4, but this machine has no GPU" in note
    assert "runs on the CPU here" in note
    assert local_accelerator_notes(profiles, {}, ("train-model.accelerator=nvidia-l4",),
                                   gpus=1, tpu_chips=0) == []
    # asked in gkeflow.yaml's compute: section rather than by --compute
    assert local_accelerator_notes(profiles, {"train-model": {"accelerator": "nvidia-l4"}},
                                   (), gpus=0, tpu_chips=0)


def test_the_default_t4_nobody_asked_for_locally_is_not_noted():
    from gkeflow.pipelines.cli.run_options import local_accelerator_notes

    assert local_accelerator_notes(_profiles(), {}, ("train-model.replicas=2",),
                                   gpus=0, tpu_chips=0) == []
    assert local_accelerator_notes(None, {}, (), gpus=0, tpu_chips=0) == []


def test_a_regression_sweep_on_accuracy_is_refused_before_it_runs():
    with pytest.raises(ParameterError, match="metric eval_accuracy does not apply to task "
                                             "regression"):
        check_parameters({"task": "regression", "metric": "eval_accuracy"})
    check_parameters({"task": "regression", "metric": "eval_rmse"})
    check_parameters({"task": "regression", "thresholds": "rmse<=300,r2>=0.5",
                      "comparison_metric": "mae"})
    with pytest.raises(ParameterError, match="task: unknown task"):
        check_parameters({"task": "regresion"})


def test_regression_settings_are_checked_before_any_step(tmp_path):
    from gkeflow.pipelines.settings.parameters import validate_run_arguments

    with pytest.raises(ParameterError, match="loss must be one of auto, mse, huber"):
        check_parameters({"loss": "mae"})
    with pytest.raises(ParameterError, match="label_transform must be one of none, log"):
        check_parameters({"label_transform": "sqrt"})
    with pytest.raises(ParameterError, match="unknown comparison_metric 'f1_macro' for "
                                             "regression"):
        check_parameters({"task": "regression", "comparison_metric": "f1_macro"})
    data = tmp_path / "d.csv"
    data.write_text("x,y\n" + "".join(f"{i % 13},{(i % 97) - 3}.5\n" for i in range(600)))
    with pytest.raises(ParameterError, match="label_transform log needs a positive label"):
        validate_run_arguments({"data_uri": str(data), "label_column": "y",
                                "task": "regression", "label_transform": "log"})
    validate_run_arguments({"data_uri": str(data), "label_column": "y", "task": "regression"})


def test_a_misspelled_accelerator_gets_no_cpu_note_before_its_refusal():
    from gkeflow.pipelines.cli.run_options import local_accelerator_notes

    profiles = _profiles(accelerator="nvidia-h100-80gbb")
    assert local_accelerator_notes(profiles, {}, ("train-model.accelerator=nvidia-h100-80gbb",),
                                   gpus=0, tpu_chips=0) == []
