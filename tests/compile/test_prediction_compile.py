"""The prediction pipeline compiles for both targets: steps, GPU image only when asked,
the Vertex AI batch prediction branch on Vertex only, uncached scoring."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from gkeflow.components import yamlio
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile
from gkeflow.pipelines.targets.compile import compile_pipeline


def _documents(path: Path) -> list[dict]:
    return [d for d in yamlio.load_all(path.read_text()) if d is not None]


def _tasks(spec: dict) -> dict:
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return tasks


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("prediction")
    return {target: compile_pipeline("prediction", target, out) for target in ("gke", "vertex")}


def test_gke_scores_then_reports_on_cpu_uncached(compiled):
    spec, platform = _documents(compiled["gke"])
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    tasks = _tasks(spec)
    assert set(tasks) == {"resolve-model", "importer", "predict-batch", "report-predictions"}
    assert tasks["report-predictions"]["dependentTasks"] == ["predict-batch"]
    # the launcher imports the looked-up model (any artifact store) for the scoring step
    assert tasks["importer"]["inputs"]["parameters"]["uri"]["taskOutputParameter"] == {
        "outputParameterKey": "Output", "producerTask": "resolve-model"}
    model = tasks["predict-batch"]["inputs"]["artifacts"]["model_files"]
    assert model["taskOutputArtifact"]["producerTask"] == "importer"
    assert all(t["cachingOptions"] == {} or not t["cachingOptions"].get("enableCache")
               for name, t in tasks.items() if name != "importer")
    executors = spec["deploymentSpec"]["executors"]
    assert all("gkeflow-gpu" not in e["container"]["image"] for e in executors.values()
               if "container" in e)  # no GPU: resolving runs in the slim image, scoring on CPU
    assert "/gkeflow:" in executors["exec-resolve-model"]["container"]["image"]
    assert "gkeflow-cpu" in executors["exec-predict-batch"]["container"]["image"]
    assert not executors["exec-importer"]["importer"].get("reimport", False)
    assert "nvidia.com/gpu" not in compiled["gke"].read_text()
    assert spec["pipelineInfo"]["name"] == "gkeflow-prediction"
    inputs = spec["root"]["inputDefinitions"]["parameters"]
    assert {"data_uri", "model_name", "model_version", "model_alias", "registry_uri",
            "max_drift", "key_column", "output_uri"} <= set(inputs)
    assert "use_batch_prediction_job" not in inputs
    assert inputs["registry_uri"]["defaultValue"].startswith("kubeflow://")


def test_vertex_is_one_document_with_a_batch_prediction_branch(compiled):
    documents = _documents(compiled["vertex"])
    assert len(documents) == 1
    spec = documents[0]
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    tasks = _tasks(spec)
    assert {"predict-batch", "report-predictions", "batch-predict-vertex"} <= set(tasks)
    conditions = [t.get("triggerPolicy", {}).get("condition", "") for t in tasks.values()]
    assert any("use_batch_prediction_job" in c for c in conditions)
    assert "use_batch_prediction_job" in spec["root"]["inputDefinitions"]["parameters"]


def test_a_gpu_profile_moves_scoring_to_the_gpu_image(tmp_path):
    gpu = ComputeProfile(cpu="4", memory="16G", accelerator="nvidia-l4", accelerator_count=1,
                         caching=False)
    path = compile_pipeline("prediction", "gke", tmp_path, compute={"predict-batch": gpu})
    spec, platform = _documents(path)
    executors = spec["deploymentSpec"]["executors"]
    scorer = executors["exec-predict-batch"]["container"]
    assert "gkeflow-gpu" in scorer["image"]
    assert scorer["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert "gkeflow-cpu" in executors["exec-report-predictions"]["container"]["image"]
    selectors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert selectors["exec-predict-batch"]["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-l4"}
    vertex = compile_pipeline("prediction", "vertex", tmp_path, compute={"predict-batch": gpu})
    text = vertex.read_text()
    assert "NVIDIA_L4" in text and "gkeflow-gpu" in text


def test_training_steps_in_the_same_config_are_ignored_and_unknown_steps_refused(tmp_path):
    from gkeflow.pipelines.definitions.prediction import resolve_compute

    train = ComputeProfile(cpu="7", memory="26G")
    profiles = resolve_compute("gke", {"train-model": train})
    assert "train-model" not in profiles
    with pytest.raises(ComputeError, match="unknown step"):
        resolve_compute("gke", {"predikt": train})


def test_committed_prediction_files_exist_and_are_fresh(compiled):
    repo = Path(__file__).resolve().parents[2] / "compiled"
    for target, fresh in compiled.items():
        committed = repo / f"prediction.{target}.yaml"
        assert committed.exists() and committed.read_text() == fresh.read_text()
