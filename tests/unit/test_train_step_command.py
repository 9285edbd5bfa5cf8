"""The compiled train-model command, run as Kubeflow Pipelines runs it (the component's
command and args with an executor input): a host that cannot train as asked ends the step
in one line and a non-zero exit, with no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gkeflow.components import yamlio

ROOT = Path(__file__).resolve().parents[2]


def _container() -> dict:
    spec = yamlio.load((ROOT / "compiled" / "components" / "train_model.yaml").read_text())
    executors = spec["deploymentSpec"]["executors"]
    return next(iter(executors.values()))["container"]


def _run_step(prepared_penguins, tmp_path: Path, env: dict[str, str],
              **parameters) -> subprocess.CompletedProcess:
    dataset_dir, prepared = prepared_penguins
    schema = tmp_path / "schema.json"
    schema.write_text(prepared.schema.to_json(), encoding="utf-8")
    outputs = tmp_path / "outputs"

    def artifact(name: str, kind: str, uri: str) -> dict:
        return {"artifacts": [{"name": name, "type": {"schemaTitle": kind}, "uri": uri,
                               "metadata": {}}]}

    executor_input = {
        "inputs": {
            "parameterValues": {"epochs": 1, **parameters},
            "artifacts": {"dataset": artifact("dataset", "system.Dataset", str(dataset_dir)),
                          "schema": artifact("schema", "system.Artifact", str(schema))},
        },
        "outputs": {
            "parameters": {"Output": {"outputFile": str(outputs / "Output")}},
            "artifacts": {name: artifact(name, kind, str(outputs / name)) for name, kind in (
                ("model", "system.Model"), ("metrics", "system.Metrics"),
                ("tensorboard", "system.Artifact"))},
            "outputFile": str(outputs / "output_metadata.json"),
        },
    }
    container = _container()
    args = [json.dumps(executor_input) if arg == "{{$}}" else arg for arg in container["args"]]
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("TPU_", "MEGASCALE_", "TF_CONFIG"))}
    base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', '')}"
    return subprocess.run([*container["command"], *args], capture_output=True, text=True,
                          env={**base, **env}, timeout=300, check=False)


@pytest.mark.parametrize("env,parameters,expected", [
    ({"MEGASCALE_NUM_SLICES": "2", "TPU_ACCELERATOR_TYPE": "v6e-8"},
     {"backend": "tensorflow"}, "this step runs on 2 TPU slices"),
    ({"TPU_ACCELERATOR_TYPE": "v6e-8"}, {"backend": "tensorflow"},
     "needs TensorFlow's TPU build (tensorflow-tpu)"),
    ({"MEGASCALE_NUM_SLICES": "2", "TPU_ACCELERATOR_TYPE": "v6e-8"}, {},
     "JAX has no TPU runtime here (libtpu is not installed)"),
    ({}, {"strategy": "tpu"}, "strategy 'tpu' was asked but this step has no TPU"),
], ids=["several-slices-on-tensorflow", "tensorflow-without-its-tpu-build",
        "jax-without-libtpu", "tpu-without-a-tpu"])
def test_a_tpu_the_host_cannot_give_ends_the_compiled_step_in_one_line(
        prepared_penguins, tmp_path, env, parameters, expected):
    done = _run_step(prepared_penguins, tmp_path, env, **parameters)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("train-model: ") and expected in last, done.stderr[-2000:]
    assert not (tmp_path / "outputs" / "output_metadata.json").exists()


def test_a_log_transform_of_a_label_below_zero_ends_the_compiled_step_in_one_line(tmp_path):
    from gkeflow.components.prepare.logic import prepare

    data = tmp_path / "d.csv"
    data.write_text("x,g,y\n" + "".join(f"{i % 17},{'ab'[i % 2]},{(i % 89) - 5}.25\n"
                                        for i in range(400)))
    prepared = prepare(str(data), tmp_path / "dataset", "y", task="regression")
    (tmp_path / "step").mkdir()
    done = _run_step((tmp_path / "dataset", prepared), tmp_path / "step", {},
                     label_transform="log")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("train-model: label_transform log needs a positive label")
