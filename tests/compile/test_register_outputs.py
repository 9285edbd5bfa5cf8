"""The registration step's output type per target: google.VertexModel on Vertex AI (so Vertex
links the run to the model version), a generic artifact elsewhere; same task name on both."""

from __future__ import annotations

from gkeflow.components import yamlio
from gkeflow.pipelines.targets.compile import compile_pipeline


def _register_component(path):
    spec = next(yamlio.load_all(path.read_text()))  # GKE adds a platform-spec document
    return spec["components"]["comp-register-model"], spec


def test_vertex_target_outputs_a_vertex_model(tmp_path):
    component, spec = _register_component(compile_pipeline("training", "vertex", tmp_path))
    output = component["outputDefinitions"]["artifacts"]["registered_model"]["artifactType"]
    assert output["schemaTitle"] == "google.VertexModel"
    executor = spec["deploymentSpec"]["executors"]["exec-register-model"]["container"]
    assert "from gkeflow.components.register.artifact_types import VertexModel" in "".join(
        executor["command"])


def test_gke_target_outputs_a_generic_artifact_and_uses_the_cluster_registry(tmp_path):
    path = compile_pipeline("training", "gke", tmp_path)
    component, spec = _register_component(path)
    output = component["outputDefinitions"]["artifacts"]["registered_model"]["artifactType"]
    assert output["schemaTitle"] == "system.Artifact"
    default = spec["root"]["inputDefinitions"]["parameters"]["registry_uri"]["defaultValue"]
    assert default.startswith("kubeflow://model-registry-service.kubeflow")
