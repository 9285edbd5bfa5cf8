"""examples/feature_selection_pipeline.py: the suite's components around a step of the user's
own, per-step compute through the suite's helper; compiles for both targets, runs locally."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from google.protobuf import json_format
from kfp import compiler
from kfp.pipeline_spec import pipeline_spec_pb2

from examples import feature_selection_pipeline as example
from gkeflow.components import yamlio
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile

STEPS = ["prepare-data", "select-features", "train-model", "evaluate-model", "register-model"]


def _compile(target: str, tmp_path: Path, compute=None) -> list[dict]:
    path = tmp_path / f"example.{target}.yaml"
    compiler.Compiler().compile(example.build_pipeline(target, compute), str(path))
    documents = [d for d in yamlio.load_all(path.read_text()) if d]
    json_format.ParseDict(documents[0], pipeline_spec_pb2.PipelineSpec(),
                          ignore_unknown_fields=False)
    return documents


def _resources(spec: dict) -> dict[str, dict]:
    return {name.removeprefix("exec-"): e["container"].get("resources", {})
            for name, e in spec["deploymentSpec"]["executors"].items()}


def test_compiles_for_gke_with_each_steps_compute(tmp_path):
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s

    spec, platform = _compile("gke", tmp_path)
    resources = _resources(spec)
    assert sorted(resources) == sorted(STEPS)
    assert resources["select-features"]["cpuLimit"] == 1.0
    assert resources["select-features"]["resourceMemoryLimit"] == "2G"
    assert resources["train-model"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert all("accelerator" not in r for step, r in resources.items() if step != "train-model")
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    configs = {name.removeprefix("exec-"): json_format.ParseDict(
        value, k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
        for name, value in executors.items()}
    assert dict(configs["train-model"].node_selector.labels) == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert configs["select-features"].active_deadline_seconds == 600
    assert not configs["select-features"].node_selector.labels


def test_compiles_for_vertex_as_one_document_and_takes_compute_overrides(tmp_path):
    documents = _compile("vertex", tmp_path, compute={
        "train-model": ComputeProfile(cpu="11", memory="40G", accelerator="nvidia-l4",
                                      accelerator_count=1)})
    assert len(documents) == 1
    resources = _resources(documents[0])
    assert resources["train-model"]["accelerator"]["resourceType"] == "NVIDIA_L4"
    assert "gke-accelerator" not in json.dumps(documents[0])


def test_invalid_compute_is_refused_before_compiling():
    with pytest.raises(ComputeError, match="train-model"):
        example.build_pipeline("gke", {"train-model": ComputeProfile(
            accelerator="nvidia-tesla-t4", accelerator_count=3)})


# --------------------------------------------------------------------------- the user's step


def _artifacts(tmp_path: Path, columns: dict[str, dict]):
    schema = {"label": "y", "label_vocabulary": ["a", "b"], "columns": [
        {"name": "y", "type": "categorical", "role": "label", "nullable": False,
         "vocabulary": ["a", "b"], "note": ""},
        *({"name": name, "type": "numeric" if "std" in stats else "categorical",
           "role": "feature", "nullable": True, "vocabulary": [], "note": ""}
          for name, stats in columns.items())]}
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "stats.json").write_text(json.dumps(
        {"splits": {"train": {"count": 100, "columns": columns}}}))
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    return dict(
        dataset=SimpleNamespace(path=str(dataset), metadata={}),
        schema=SimpleNamespace(path=str(tmp_path / "schema.json"), metadata={}),
        selected_schema=SimpleNamespace(path=str(tmp_path / "out" / "schema.json"), metadata={}),
        report=SimpleNamespace(path=str(tmp_path / "out" / "report.md"), metadata={}),
    )


COLUMNS = {
    "kept": {"count": 100, "missing": 5, "std": 1.5},
    "sparse": {"count": 100, "missing": 40, "std": 2.0},
    "constant": {"count": 100, "missing": 0, "std": 0.0},
    "one_value": {"count": 100, "missing": 0, "distinct": 1},
    "named": {"count": 100, "missing": 0, "distinct": 3},
    "colour": {"count": 100, "missing": 10, "distinct": 4},
}


def test_select_features_marks_dropped_features_ignored_with_the_reason(tmp_path):
    artifacts = _artifacts(tmp_path, COLUMNS)
    kept = example.select_features.python_func(
        **artifacts, drop_columns=" named ", max_missing_fraction=0.2)
    assert kept == 2
    out = json.loads(Path(artifacts["selected_schema"].path).read_text())
    roles = {c["name"]: (c["role"], c["note"]) for c in out["columns"]}
    assert roles["kept"] == ("feature", "") and roles["colour"] == ("feature", "")
    assert roles["y"][0] == "label"
    assert roles["named"] == ("ignored", "dropped by drop_columns")
    assert roles["sparse"][0] == "ignored" and "missing in 40%" in roles["sparse"][1]
    assert roles["constant"] == ("ignored", "a single value in the train split")
    assert roles["one_value"][0] == "ignored"
    assert artifacts["selected_schema"].metadata["features"] == ["kept", "colour"]
    assert "| sparse | missing in 40% of train rows (> 20%) |" in \
        Path(artifacts["report"].path).read_text()


def test_select_features_keeps_a_feature_without_statistics(tmp_path):
    artifacts = _artifacts(tmp_path, {"known": {"count": 10, "missing": 0, "std": 1.0}})
    schema = json.loads(Path(artifacts["schema"].path).read_text())
    schema["columns"].append({"name": "unprofiled", "type": "numeric", "role": "feature",
                              "nullable": True, "vocabulary": [], "note": ""})
    Path(artifacts["schema"].path).write_text(json.dumps(schema))
    assert example.select_features.python_func(**artifacts) == 2


def test_select_features_refuses_unknown_names_and_an_empty_selection(tmp_path):
    artifacts = _artifacts(tmp_path, {"only": {"count": 10, "missing": 0, "std": 1.0}})
    with pytest.raises(ValueError, match="drop_columns names no feature column: nope"):
        example.select_features.python_func(**artifacts, drop_columns="nope")
    with pytest.raises(ValueError, match="every feature was dropped"):
        example.select_features.python_func(**artifacts, drop_columns="only")
    assert not Path(artifacts["selected_schema"].path).exists()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*non-Python base image:RuntimeWarning")
def test_runs_locally_and_trains_on_the_selected_features_only(tmp_path):
    run_dir = example.run_locally(tmp_path / "out", epochs=2,
                                  registry_uri=f"sqlite:///{tmp_path / 'registry.db'}")

    def outputs(step: str) -> dict:
        return json.loads((run_dir / step / "executor_output.json").read_text())

    assert {p.name for p in run_dir.iterdir()} >= set(STEPS[:4])
    selected = outputs("select-features")
    kept = selected["artifacts"]["selected_schema"]["artifacts"][0]["metadata"]["features"]
    assert selected["parameterValues"]["Output"] == len(kept) >= 4
    assert "year" not in kept  # dropped by the pipeline's default drop_columns
    model = outputs("train-model")["artifacts"]["model"]["artifacts"][0]["metadata"]
    assert model["features"] == kept and model["epochs_run"] <= 2
    assert isinstance(outputs("evaluate-model")["parameterValues"]["Output"], bool)
