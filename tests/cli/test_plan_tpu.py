"""`gkeflow plan` with TPU compute: the slice shown per target, a bad topology refused."""

from __future__ import annotations

from click.testing import CliRunner

from gkeflow.pipelines.cli.main import main

TPU = ["--compute", "train-model.accelerator=tpu-v6e"]


def run(*args: str, tmp_path=None):  # tmp_path: the caller has chdir-ed there
    return CliRunner(env={"COLUMNS": "400"}).invoke(
        main, ["plan", *args])


def test_gke_multi_host_slice_is_shown_as_a_jobset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("--target", "gke", *TPU, "--compute", "train-model.topology=4x4",
                 "--output", "json", tmp_path=tmp_path)
    assert result.exit_code == 0, result.output
    assert "16 chips on 4 x 4 (hosts x chips per host), 1 slice" in result.output
    assert "launches a JobSet" in result.output and "ct6e-standard-4t" in result.output


def test_the_gke_table_says_how_tpu_chips_are_requested(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("--target", "gke", *TPU, "--compute", "train-model.topology=2x4",
                 tmp_path=tmp_path)
    assert result.exit_code == 0, result.output
    assert "TPUs: google.com/tpu, chips per host" in " ".join(result.output.split())


def test_a_topology_the_generation_lacks_is_refused_listing_the_valid_ones(tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("--target", "gke", *TPU, "--compute", "train-model.topology=3x3",
                 tmp_path=tmp_path)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert ("train-model: topology '3x3' is not valid for tpu-v6e on GKE; choose one of 1x1, "
            "2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16") in result.output


def test_vertex_single_host_slice_shows_the_custom_job_machine_and_topology(tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("--target", "vertex", "--compute", "train-model.accelerator=tpu-v5e",
                 "--compute", "train-model.topology=2x4", tmp_path=tmp_path)
    assert result.exit_code == 0, result.output
    assert "CustomJob on ct5lp-hightpu-8t with tpu_topology 2x4" in " ".join(
        result.output.split())


def test_plan_names_the_tpu_image_and_its_pull_size_for_the_training_step(tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("--target", "gke", *TPU, "--compute", "train-model.topology=2x4",
                 tmp_path=tmp_path)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "gkeflow-tpu" in x)
    # the Keras candidate of model_type auto trains on the slice
    assert "pull about 0.81 GB" in line and line.rstrip().endswith(": train-mlp")
    assert "gkeflow-gpu" not in result.output


def test_two_slices_are_planned_and_priced_as_twice_the_chips(tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    one, two = (json.loads(run("--target", "gke", *TPU, "--compute", "train-model.topology=4x4",
                               "--compute", "train-model.scheduling=spot", "--compute",
                               f"train-model.replicas={n}", "--output", "json").output)
                for n in (1, 2))
    cost = {n: next(s for s in plan["cost"]["steps"] if s["step"] == "train-model")
            for n, plan in ((1, one), (2, two))}
    assert cost[1]["usd_per_hour"] > 0
    assert abs(cost[2]["usd_per_hour"] - 2 * cost[1]["usd_per_hour"]) <= 0.001
    assert (cost[2]["nodes"], cost[2]["unit"]) == (2, "slice")
    text = run("--target", "gke", *TPU, "--compute", "train-model.topology=4x4",
               "--compute", "train-model.replicas=2").output
    assert "(2 slices)" in text and "2 slices, 32 chips in all" in " ".join(text.split())
