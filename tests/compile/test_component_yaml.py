"""Per-component YAML: one loadable, pinned, versioned file per registered component, checked
fresh; a pipeline built from the files alone compiles for GKE and Vertex."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format
from kfp import components, dsl
from kfp.dsl import Artifact, Input, Output
from kfp.pipeline_spec import pipeline_spec_pb2

import gkeflow.components as suite
from gkeflow.components import yamlio
from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE, SLIM_IMAGE, VERSION
from gkeflow.pipelines.cli import reference
from gkeflow.pipelines.targets import component_yaml
from gkeflow.pipelines.targets.compile import ReleaseError
from gkeflow.pipelines.targets.component_yaml import (
    compile_component,
    compile_components,
    component_names,
    stale_component_files,
    version_line,
)

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "compiled"
CPU_DIGEST = "sha256:" + "a" * 64
GPU_DIGEST = "sha256:" + "b" * 64
SLIM_DIGEST = "sha256:" + "c" * 64


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def echo_step(source: Input[Artifact], copy: Output[Artifact], times: int = 2) -> str:
    """Copies an artifact; stands in for a component added to the suite later.

    Args:
        source: Artifact to copy.
        copy: The copy.
        times: How often to say so.

    Returns:
        What was said.
    """
    return "copied " * times


@dsl.container_component
def shout_step(text: str, said: dsl.OutputPath(str)):
    """Says it aloud; a container component registered later.

    Args:
        text: What to say.
        said: Where it is written.
    """
    return dsl.ContainerSpec(image=GPU_IMAGE, command=["sh", "-c"],
                             args=[f"echo {text} > {said}"])


@pytest.fixture
def extra_component(monkeypatch):
    """Register one more component the way the suite registers its own."""
    for name in ("echo_step", "shout_step"):
        monkeypatch.setitem(suite._COMPONENTS, name, __name__)
    monkeypatch.setattr(suite, "__all__", [*suite.__all__, "echo_step", "shout_step"])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("compiled")
    return {p.stem: p for p in compile_components(out, lock={})}


def _spec(path: Path) -> dict:
    (document,) = [d for d in yamlio.load_all(path.read_text()) if d is not None]
    return document


def test_the_four_components_are_registered_and_each_gets_a_file(compiled):
    assert {"prepare_data", "train_model", "evaluate_model", "register_model"} <= \
        set(component_names())
    # the sweep's, the fan-out preparation's and the Vertex AI registration steps too
    assert {"select_best_trial", "tune_with_vizier", "plan_prepare", "prepare_group",
            "merge_prepared", "register_model_vertex"} <= set(component_names())
    from gkeflow.components.register import vertex_component

    assert suite.register_model_vertex is vertex_component.register_model
    (interface,) = _spec(compiled["register_model_vertex"])["components"].values()
    registered = interface["outputDefinitions"]["artifacts"]["registered_model"]
    assert registered["artifactType"]["schemaTitle"] == "google.VertexModel"
    assert sorted(compiled) == sorted(component_names())
    assert all(p.parent.name == "components" for p in compiled.values())


def test_each_file_loads_with_kfp_and_has_the_python_components_interface(compiled):
    for name, path in compiled.items():
        loaded = components.load_component_from_file(str(path))
        python = getattr(suite, name).component_spec
        assert loaded.name == python.name
        assert set(loaded.component_spec.inputs) == set(python.inputs)
        assert set(loaded.component_spec.outputs) == set(python.outputs)
        for key, spec in python.inputs.items():
            assert loaded.component_spec.inputs[key].default == spec.default, (name, key)
        json_format.ParseDict(_spec(path), pipeline_spec_pb2.PipelineSpec(),
                              ignore_unknown_fields=False)


def test_a_file_loads_from_a_url(compiled, httpserver):
    text = compiled["evaluate_model"].read_text()
    httpserver.expect_request("/v/evaluate_model.yaml").respond_with_data(text)
    loaded = components.load_component_from_url(httpserver.url_for("/v/evaluate_model.yaml"))
    assert loaded.name == "evaluate-model"
    assert "min_accuracy" in loaded.component_spec.inputs


def test_each_file_carries_the_version_in_its_header_and_description(compiled):
    for name, path in compiled.items():
        text = path.read_text()
        assert text.startswith(f"# gkeflow {VERSION}: component {name}.")
        header = text.split("\ncomponents:", 1)[0]
        assert f"#              {version_line()}\n# Inputs:" in header
        assert version_line() == f"Version: gkeflow {VERSION}."
        (executor,) = _spec(path)["deploymentSpec"]["executors"].values()
        assert executor["container"]["image"].endswith(f":{VERSION}")  # lock={}: by tag


def test_output_artifacts_are_described_from_the_docstring(compiled):
    spec = _spec(compiled["prepare_data"])
    (interface,) = spec["components"].values()
    outputs = interface["outputDefinitions"]["artifacts"]
    assert outputs["rejected"]["description"].startswith("CSV of the rejected rows")
    assert all(o.get("description") for o in outputs.values())


def test_images_are_the_suites_and_pinned_by_the_lock(tmp_path):
    lock = {CPU_IMAGE: CPU_DIGEST, GPU_IMAGE: GPU_DIGEST, SLIM_IMAGE: SLIM_DIGEST}
    images = {}
    for path in compile_components(tmp_path, lock=lock, release=True):
        (executor,) = _spec(path)["deploymentSpec"]["executors"].values()
        images[path.stem] = executor["container"]["image"]
        assert "pip install" not in path.read_text()
    assert images["train_model"] == f"us-docker.pkg.dev/gkeflow/images/gkeflow-gpu@{GPU_DIGEST}"
    assert images["prepare_data"] == f"us-docker.pkg.dev/gkeflow/images/gkeflow@{SLIM_DIGEST}"
    assert images["evaluate_model"] == f"us-docker.pkg.dev/gkeflow/images/gkeflow-cpu@{CPU_DIGEST}"
    # the image a tuning job's trials run in is a default input: pinned by the same lock
    (interface,) = _spec(tmp_path / "components" / "tune_with_vizier.yaml")["components"].values()
    trial_image = interface["inputDefinitions"]["parameters"]["trial_image"]["defaultValue"]
    assert trial_image == f"us-docker.pkg.dev/gkeflow/images/gkeflow-gpu@{GPU_DIGEST}"


def test_release_refuses_a_tag_only_component_image(tmp_path):
    with pytest.raises(ReleaseError, match="component train_model: image referenced by tag"):
        compile_component("train_model", tmp_path, lock={CPU_IMAGE: CPU_DIGEST}, release=True)
    assert not (tmp_path / "components" / "train_model.yaml").exists()
    with pytest.raises(ReleaseError, match=f"tune_with_vizier: .* tag only: {GPU_IMAGE}"):
        compile_component("tune_with_vizier", tmp_path,
                          lock={CPU_IMAGE: CPU_DIGEST, SLIM_IMAGE: SLIM_DIGEST}, release=True)


def test_committed_component_files_are_fresh():
    assert stale_component_files(COMMITTED) == []


def test_stale_missing_and_orphan_files_are_detected(tmp_path):
    compile_components(tmp_path)
    folder = tmp_path / "components"
    (folder / "train_model.yaml").write_text("changed\n")
    (folder / "prepare_data.yaml").unlink()
    orphan = folder / "retired_step.yaml"
    orphan.write_text("# gkeflow 0.0.1: component retired_step. Generated\n")
    (folder / "notes.yaml").write_text("mine: true\n")  # not generated: left alone
    assert stale_component_files(tmp_path) == [
        folder / "prepare_data.yaml", folder / "train_model.yaml", orphan]
    compile_components(tmp_path)
    assert stale_component_files(tmp_path) == []
    assert not orphan.exists() and (folder / "notes.yaml").exists()


def test_a_component_added_to_the_registry_is_compiled_and_documented(tmp_path,
                                                                       extra_component):
    assert component_names()[-2:] == ["echo_step", "shout_step"]
    paths = {p.stem: p for p in compile_components(tmp_path, lock={GPU_IMAGE: GPU_DIGEST})}
    shout = components.load_component_from_file(str(paths["shout_step"]))
    assert set(shout.component_spec.inputs) == {"text"}
    assert shout.component_spec.implementation.container.image.endswith(f"@{GPU_DIGEST}")
    loaded = components.load_component_from_file(str(paths["echo_step"]))
    assert set(loaded.component_spec.inputs) == {"source", "times"}
    assert stale_component_files(tmp_path, lock={GPU_IMAGE: GPU_DIGEST}) == []
    text = reference.render()
    assert "## shout_step" in text and "| `said` | `STRING` | Where it is written. |" in text
    assert "## echo_step" in text
    assert "| `times` | `NUMBER_INTEGER` | `2` | How often to say so. |" in text
    assert "| `copy` | `system.Artifact` | The copy. |" in text
    assert "| `Output` | `STRING` | What was said. |" in text


def test_compile_check_on_the_command_line_covers_component_files(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    runner = CliRunner()
    result = runner.invoke(main, ["compile", "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "components/train_model.yaml" in result.output
    assert runner.invoke(main, ["compile", "--check", "--output", str(tmp_path)]).exit_code == 0
    (tmp_path / "components" / "evaluate_model.yaml").unlink()
    result = runner.invoke(main, ["compile", "--check", "--output", str(tmp_path)])
    assert result.exit_code == 1
    assert "components/evaluate_model.yaml" in result.output


_RUN_EXAMPLE = (
    "import json, runpy, sys\n"
    "example = sys.argv.pop(1)\n"
    "try:\n"
    "    runpy.run_path(example, run_name='__main__')\n"
    "except SystemExit as exit_:\n"
    "    assert not exit_.code, exit_.code\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gkeflow'))))\n"
)


def _compile_example(name: str, targets, tmp_path: Path) -> dict[str, Path]:
    """Run examples/<name>.py on the committed component files for each target in a fresh
    interpreter, checking that no gkeflow module was imported; target -> YAML path."""
    example = REPO / "examples" / f"{name}.py"
    out = {}
    for target in targets:
        out[target] = tmp_path / f"{name}.{target}.yaml"
        result = subprocess.run(
            [sys.executable, "-c", _RUN_EXAMPLE, str(example), str(COMMITTED / "components"),
             target, str(out[target])],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads(result.stdout.splitlines()[-1]) == []  # no gkeflow module imported
    return out


def test_a_pipeline_from_the_yaml_files_alone_compiles_for_both_targets(tmp_path):
    """examples/yaml_components_pipeline.py imports kfp only; gkeflow is never imported."""
    out = _compile_example("yaml_components_pipeline", ("gke", "vertex"), tmp_path)

    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s

    gke = [d for d in yamlio.load_all(out["gke"].read_text()) if d]
    assert len(gke) == 2
    json_format.ParseDict(gke[0], pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False)
    executors = gke[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert list(executors) == ["exec-train-model"]
    config = json_format.ParseDict(executors["exec-train-model"],
                                   k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
    assert dict(config.node_selector.labels) == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    resources = gke[0]["deploymentSpec"]["executors"]["exec-train-model"]["container"][
        "resources"]
    assert resources["accelerator"]["resourceType"] == "nvidia.com/gpu"

    vertex = [d for d in yamlio.load_all(out["vertex"].read_text()) if d]
    assert len(vertex) == 1
    json_format.ParseDict(vertex[0], pipeline_spec_pb2.PipelineSpec(),
                          ignore_unknown_fields=False)
    resources = vertex[0]["deploymentSpec"]["executors"]["exec-train-model"]["container"][
        "resources"]
    assert resources["accelerator"]["resourceType"] == "NVIDIA_TESLA_T4"
    for document in (gke[0], vertex[0]):
        assert set(document["root"]["dag"]["tasks"]) >= {
            "prepare-data", "train-model", "evaluate-model"}
    assert component_yaml.COMPONENTS_DIR == "components"


def test_a_sweep_from_the_yaml_files_alone_compiles_for_both_targets(tmp_path):
    """examples/yaml_sweep_pipeline.py: fan-out preparation, trials with select_best_trial
    or tune_with_vizier, and register_model_vertex on Vertex, from the YAML files only."""
    from kfp.kubernetes import kubernetes_executor_config_pb2 as k8s

    out = _compile_example("yaml_sweep_pipeline", ("gke", "vertex", "vertex-vizier"),
                           tmp_path)
    documents = {target: [d for d in yamlio.load_all(path.read_text()) if d]
                 for target, path in out.items()}
    assert [len(documents[t]) for t in out] == [2, 1, 1]  # Vertex: a single document
    for target, (spec, *_) in documents.items():
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec(),
                              ignore_unknown_fields=False)
        steps = {name.removeprefix("exec-") for name in spec["deploymentSpec"]["executors"]}
        trials = ({"tune-with-vizier"} if target == "vertex-vizier"
                  else {"train-model", "select-best-trial"})
        assert steps == {"plan-prepare", "prepare-group", "merge-prepared", "evaluate-model",
                         "register-model"} | trials, target
        registered = spec["components"]["comp-register-model"]["outputDefinitions"][
            "artifacts"]["registered_model"]["artifactType"]["schemaTitle"]
        assert registered == ("system.Artifact" if target == "gke" else "google.VertexModel")
        loops = sorted(task["iteratorPolicy"]["parallelismLimit"]
                       for task in spec["root"]["dag"]["tasks"].values()
                       if "iteratorPolicy" in task)
        assert loops == ([4] if target == "vertex-vizier" else [2, 4]), target
    executors = documents["gke"][1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert list(executors) == ["exec-train-model"]  # the GPU only on the trials
    config = json_format.ParseDict(executors["exec-train-model"],
                                   k8s.KubernetesExecutorConfig(), ignore_unknown_fields=False)
    assert dict(config.node_selector.labels) == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    train = documents["vertex"][0]["deploymentSpec"]["executors"]["exec-train-model"]
    assert train["container"]["resources"]["accelerator"]["resourceType"] == "NVIDIA_TESLA_T4"
