"""model_type auto's candidates as steps of their own: which family each step trains or
skips, train-model choosing among their folders (a failed one left out, none asked: it
trains itself), the families a run or a gkeflow.yaml asks for, and each candidate's
compute."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.train.params import TrainParams


@pytest.mark.parametrize(("params", "pipeline", "trains"), [
    (TrainParams(model_type="auto"), "gbdt,mlp,linear", {"gbdt", "mlp", "linear"}),
    (TrainParams(model_type="auto", candidates="gbdt"), "gbdt,mlp,linear", {"gbdt"}),
    # the pipeline's own set when the run names none (a wide_deep step is not skipped)
    (TrainParams(model_type="auto"), "wide_deep,gbdt", {"wide_deep", "gbdt"}),
    (TrainParams(model_type="mlp"), "gbdt,mlp,linear", {"mlp"}),
    # a user module without candidates trains alone, as it always has
    (TrainParams(model_type="auto", user_module="m.py"), "gbdt,mlp,user", {"user"}),
    (TrainParams(model_type="auto", user_module="m.py", candidates="user,gbdt"),
     "gbdt,mlp,user", {"user", "gbdt"}),
])
def test_each_candidate_step_trains_what_the_run_asks_and_says_why_not(params, pipeline,
                                                                        trains):
    from gkeflow.components.train.candidates import skip_reason

    families = pipeline.split(",")
    reasons = {family: skip_reason(params, family, False, pipeline) for family in families}
    assert {family for family, reason in reasons.items() if not reason} == trains & set(
        families)
    for family, reason in reasons.items():
        if family not in trains:
            assert reason.startswith(("model_type is", "not among this run's candidates"))
    # trees and the linear model leave a TPU host with the reason
    assert skip_reason(TrainParams(model_type="auto"), "gbdt", True) == (
        "trains on CPUs or GPUs, not on this TPU")


def _folder(root, family, status, **fields):
    folder = root / family
    folder.mkdir(parents=True)
    (folder / "candidate.json").write_text(json.dumps({"family": family, "status": status,
                                                       **fields}))
    return folder


def test_train_model_chooses_among_the_folders_and_fails_only_when_none_trained(
        prepared_penguins, tmp_path):
    from gkeflow.components.train.choose import (
        NoCandidateTrained,
        asked_any,
        choose,
        deciding_metric,
        train_into,
    )
    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    schema = prepared.schema
    params = TrainParams(model_type="auto", gbdt_rounds=50, ensemble=False)
    metric = deciding_metric(schema, "none")
    folders = {"linear": tmp_path / "linear", "gbdt": tmp_path / "gbdt"}
    for family, folder in folders.items():
        entry = train_into(folder, family, metric, train, dataset_dir, schema, params)
        assert entry["status"] == "succeeded" and entry[metric] > 0
    # a family that fails is recorded, not raised: its step stays green
    failed = train_into(tmp_path / "mlp", "mlp", metric, train, dataset_dir, schema,
                        TrainParams(model_type="auto", hidden_units=(0,)))
    assert failed["status"] == "failed" and failed["error"].startswith("ValueError: ")
    folders["mlp"] = tmp_path / "mlp"
    skipped = _folder(tmp_path, "wide_deep", "skipped", reason="model_type is gbdt")
    folders["wide_deep"] = skipped
    result = choose(dataset_dir, schema, tmp_path / "model", params, folders)
    metadata = json.loads((tmp_path / "model" / "gkeflow_model.json").read_text())
    selection = metadata["model_selection"]
    losses = {n: json.loads((folders[n] / "candidate.json").read_text())[metric]
              for n in ("linear", "gbdt")}
    assert selection["chosen"] == min(losses, key=losses.get)
    assert set(selection["candidates"]) == {"linear", "gbdt", "mlp"}  # skipped: not a candidate
    assert selection["candidates"]["mlp"]["status"] == "failed"
    assert result.metrics[f"candidate_linear_{metric}"] == pytest.approx(losses["linear"])
    assert asked_any(folders)
    with pytest.raises(NoCandidateTrained, match="every candidate failed"):
        choose(dataset_dir, schema, tmp_path / "none", params, {"mlp": tmp_path / "mlp"})
    assert not (tmp_path / "none").exists()
    assert not asked_any({"wide_deep": skipped})
    # a step that wrote nothing (killed before its first line) counts as failed
    (tmp_path / "empty").mkdir()
    assert asked_any({"gbdt": tmp_path / "empty"})


def test_one_family_asked_is_published_as_trained_without_a_selection(prepared_penguins,
                                                                      tmp_path):
    from gkeflow.components.train.choose import choose, train_into
    from gkeflow.components.train.logic import train

    dataset_dir, prepared = prepared_penguins
    params = TrainParams(model_type="linear")
    train_into(tmp_path / "linear", "linear", "eval_loss", train, dataset_dir,
               prepared.schema, params)
    _folder(tmp_path, "gbdt", "skipped", reason="model_type is linear")
    choose(dataset_dir, prepared.schema, tmp_path / "model", params,
           {"linear": tmp_path / "linear", "gbdt": tmp_path / "gbdt"})
    metadata = json.loads((tmp_path / "model" / "gkeflow_model.json").read_text())
    assert metadata["model_family"] == "linear" and "model_selection" not in metadata


def test_the_families_a_run_trains_decide_the_pipeline_s_steps():
    from gkeflow.pipelines.settings.config import GkeflowConfig
    from gkeflow.pipelines.settings.parameters import ParameterError, run_families

    assert run_families({}) == ("gbdt", "mlp", "linear")
    assert run_families({"model_type": "wide_deep"}) == ("wide_deep",)
    assert run_families({"candidates": "mlp,gbdt"}) == ("mlp", "gbdt")
    assert run_families({"user_module": "m.py"}) == ("user",)
    assert run_families({}, ("gbdt", "wide_deep")) == ("gbdt", "wide_deep")
    assert run_families({"candidates": "linear"}, ("gbdt", "mlp")) == ("linear",)
    with pytest.raises(ParameterError, match="unknown model family 'trees'"):
        run_families({"candidates": "trees"})
    config = GkeflowConfig.model_validate({"candidates": ["gbdt", "mlp"]})
    assert config.training_families() == ("gbdt", "mlp")
    with pytest.raises(ValueError, match="unknown model family"):
        GkeflowConfig.model_validate({"candidates": ["forest"]})
    with pytest.raises(ValueError, match="a list of model families"):
        GkeflowConfig.model_validate({"candidates": []})


def test_each_candidate_gets_its_own_compute():
    from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile
    from gkeflow.pipelines.definitions.candidates_stage import CHOOSE_PROFILE, CPU_CANDIDATE
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE, resolve_compute

    default = resolve_compute("gke")
    assert default["train-mlp"] == default["train-gbdt"] == DEFAULT_COMPUTE["train-model"]
    assert default["train-linear"] == CPU_CANDIDATE and default["train-model"] == CHOOSE_PROFILE
    eight = DEFAULT_COMPUTE["train-model"].with_overrides(
        accelerator="nvidia-h100-80gb", accelerator_count=8)
    profiles = resolve_compute("gke", {"train-model": eight})
    assert profiles["train-mlp"].accelerator_count == 8
    assert profiles["train-gbdt"] == CPU_CANDIDATE  # XGBoost uses one GPU, not eight
    tpu = DEFAULT_COMPUTE["train-model"].with_overrides(accelerator="tpu-v6e", topology="2x2",
                                                        accelerator_count=0)
    profiles = resolve_compute("gke", {"train-model": tpu})
    assert profiles["train-mlp"].uses_tpu and profiles["train-gbdt"] == CPU_CANDIDATE
    # gkeflow.yaml's compute for a candidate wins; one family asked: one train-model step
    l4 = ComputeProfile(cpu="8", memory="32G", accelerator="nvidia-l4", accelerator_count=1)
    assert resolve_compute("gke", {"train-gbdt": l4})["train-gbdt"] == l4
    assert "train-gbdt" not in resolve_compute("gke", families=("mlp",))
    # several machines: the candidates train one after the other in train-model
    two = DEFAULT_COMPUTE["train-model"].with_overrides(replicas=2)
    assert "train-mlp" not in resolve_compute("gke", {"train-model": two})
    with pytest.raises(ComputeError, match="train-mlp: a candidate trains on one machine"):
        resolve_compute("gke", {"train-mlp": two})
    # trees on a TPU would start a slice only to skip: refused before any step
    with pytest.raises(ComputeError, match="train-gbdt: gbdt trains on CPUs or GPUs, not on"):
        resolve_compute("gke", {"train-gbdt": tpu})


def test_a_submission_or_schedule_compiles_the_candidate_steps_its_parameters_ask_for(
        tmp_path):
    from gkeflow.components import yamlio
    from gkeflow.pipelines.settings.config import GkeflowConfig
    from gkeflow.pipelines.targets.schedule import compiled_for
    from gkeflow.pipelines.targets.submit import prepare_pipeline

    def steps(prepared):
        tasks = next(iter(yamlio.load_all(open(prepared.path).read())))["root"]["dag"]["tasks"]
        return {task for task in tasks if task.startswith("train-")}

    config = GkeflowConfig.model_validate({
        "targets": {"gke": {"host": "http://127.0.0.1:9", "pipeline_root": "gs://b/root"}},
        "parameters": {"default": {"candidates": "gbdt,linear"}},
        "schedules": [{"name": "nightly", "pipeline": "training", "target": "gke",
                       "cron": "0 3 * * *"},
                      {"name": "trees", "pipeline": "training", "target": "gke",
                       "cron": "0 4 * * *", "parameters": {"model_type": "gbdt"}}]})
    assert steps(prepare_pipeline("training", "gke", tmp_path / "a", config=config)) == {
        "train-gbdt", "train-linear", "train-model"}
    # one family asked for (submit --param model_type=gbdt): no step starts for the others
    one = config.for_run({"candidates": "gbdt,linear", "model_type": "gbdt"})
    assert steps(prepare_pipeline("training", "gke", tmp_path / "b", config=one)) == {
        "train-model"}
    (_, nightly), (_, trees) = (compiled_for(config, s) for s in config.schedules)
    assert nightly[-1] == ("gbdt", "linear") and trees[-1] == ("gbdt",)


def test_the_init_example_s_candidates_line_loads(tmp_path):
    from gkeflow.pipelines.settings.config import EXAMPLE_CONFIG, load_config

    text = EXAMPLE_CONFIG.replace("# candidates: [gbdt, mlp, linear]",
                                  "candidates: [gbdt, mlp, linear]")
    assert text != EXAMPLE_CONFIG
    (tmp_path / "gkeflow.yaml").write_text(text)
    config = load_config(tmp_path / "gkeflow.yaml")
    assert config.candidates == ("gbdt", "mlp", "linear")
    assert config.training_families() == ("gbdt", "mlp", "linear")
