"""gkeflow.yaml's preparation: section compiles the training and sweep pipelines with
fan-out preparation (plan -> ParallelFor groups -> merge) feeding training and evaluation."""

from __future__ import annotations

import pytest
from kfp import compiler

from gkeflow.components import yamlio
from gkeflow.pipelines.definitions.sweep import build_sweep_pipeline
from gkeflow.pipelines.definitions.training import build_training_pipeline, resolve_compute
from gkeflow.pipelines.settings.config import ConfigError, load_config
from gkeflow.pipelines.settings.preparation_settings import PreparationSettings

FANOUT = PreparationSettings(fanout=True, groups=24, parallelism=5)


def _spec(pipeline, tmp_path, name="p.yaml"):
    path = tmp_path / name
    compiler.Compiler().compile(pipeline, str(path))
    return list(yamlio.load_all(path.read_text()))[0]


def _tasks(spec) -> dict:
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update(component.get("dag", {}).get("tasks", {}))
    return tasks


@pytest.mark.parametrize("build", [build_training_pipeline, build_sweep_pipeline])
@pytest.mark.parametrize("target", ["gke", "vertex"])
def test_fanout_preparation_feeds_training_and_evaluation(tmp_path, build, target):
    spec = _spec(build(target, preparation=FANOUT), tmp_path)
    tasks = _tasks(spec)
    assert {"plan-prepare", "prepare-group", "merge-prepared"} <= set(tasks)
    assert "prepare-data" not in tasks
    loop = next(t for t in spec["root"]["dag"]["tasks"].values()
                if "iteratorPolicy" in t)
    assert loop["iteratorPolicy"]["parallelismLimit"] == 5
    plan = tasks["plan-prepare"]["inputs"]["parameters"]
    assert plan["max_groups"]["componentInputParameter"] == "prepare_groups"
    assert spec["root"]["inputDefinitions"]["parameters"]["prepare_groups"][
        "defaultValue"] == 24
    evaluate = tasks["evaluate-model"]["inputs"]["artifacts"]["dataset"]
    assert evaluate["taskOutputArtifact"]["producerTask"] == "merge-prepared"
    on_workspace = plan.get("workspace_path", {}).get("runtimeValue", {}).get("constant")
    group = tasks["prepare-group"]["inputs"]["parameters"]["workspace_path"]
    # GKE (default MinIO root): the groups write their shards to the run's workspace
    expected = "{{$.workspace_path}}" if target == "gke" else ""
    assert on_workspace == expected == group["runtimeValue"]["constant"]


def test_one_pod_is_the_default_and_plan_lists_only_the_steps_that_run():
    assert "prepare-data" in resolve_compute("gke")
    assert "plan-prepare" not in resolve_compute("gke")
    fanned = resolve_compute("gke", preparation=FANOUT)
    assert {"plan-prepare", "prepare-group", "merge-prepared"} <= set(fanned)
    assert "prepare-data" not in fanned


def test_the_config_section_is_validated(tmp_path):
    path = tmp_path / "gkeflow.yaml"
    path.write_text("preparation: {fanout: true, groups: 16}\n")
    assert load_config(path).preparation == PreparationSettings(fanout=True, groups=16)
    path.write_text("preparation: {fanout: true, groups: 0}\n")
    with pytest.raises(ConfigError, match="preparation.groups"):
        load_config(path)
    path.write_text("preparation: {fan_out: true}\n")
    with pytest.raises(ConfigError, match="fan_out"):
        load_config(path)


def test_plan_shows_the_fanout_steps_and_the_workspace_they_share(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    config = tmp_path / "gkeflow.yaml"
    config.write_text("preparation: {fanout: true, parallelism: 4}\n")
    result = CliRunner().invoke(main, ["plan", "--target", "gke", "--config", str(config)])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip() for line in result.output.splitlines()
            if line.startswith("│")}
    assert {"plan-prepare", "prepare-group", "merge-prepared"} <= rows
    assert "prepare-data" not in rows
    assert "in plan-prepare, prepare-group, train-model" in result.output
    assert "fan-out groups run 4 at a time" in " ".join(result.output.split())
    config.write_text("preparation: {fanout: true}\nworkspace: {access_mode: ReadWriteMany, "
                      "storage_class: standard-rwx}\n")
    result = CliRunner().invoke(main, ["plan", "--target", "gke", "--config", str(config)])
    assert "standard-rwx (ReadWriteMany)" in result.output and "note: fan-out" not in result.output


def test_plan_says_where_shards_go_when_a_shard_root_is_set(tmp_path):
    from click.testing import CliRunner

    from gkeflow.pipelines.cli.main import main

    config = tmp_path / "gkeflow.yaml"
    config.write_text("parameters: {default: {shard_root: 'gs://shards-bucket/prepared'}}\n")
    result = CliRunner().invoke(main, ["plan", "--target", "gke", "--config", str(config)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "evaluate-model: checkpoints; deleted when the run succeeds" in text
    assert "prepared shards: gs://shards-bucket/prepared (parameters.default)" in text
    assert "prepared shards and checkpoints" not in text
    config.write_text("")
    result = CliRunner().invoke(main, ["plan", "--target", "gke", "--config", str(config)])
    assert "evaluate-model: prepared shards and checkpoints;" in " ".join(result.output.split())
