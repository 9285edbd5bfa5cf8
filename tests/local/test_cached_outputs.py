"""A step served from kfp.local's cache writes nothing into the new run: its outputs (the
model folder, the data report, their metadata, its parameters) are read from the run that
made them, so a cached run's summary shows the same lines as the first."""

from kfp import dsl
from kfp.dsl import Model, Output

from gkeflow.pipelines.targets.local import run_local


@dsl.component(base_image="python:3.11")
def prepare_data(report: Output[dsl.Artifact]) -> int:
    import os

    os.makedirs(report.path, exist_ok=True)
    with open(os.path.join(report.path, "index.html"), "w") as handle:
        handle.write("<p>report</p>")
    return 42


@dsl.component(base_image="python:3.11")
def train_model(rows: int, model: Output[Model]):
    import os

    os.makedirs(model.path, exist_ok=True)
    with open(os.path.join(model.path, "weights"), "w") as handle:
        handle.write(str(rows))
    model.metadata["strategy"] = f"one device, {rows} rows"


@dsl.pipeline(name="cached-outputs")
def _pipeline():
    prepared = prepare_data()
    train_model(rows=prepared.outputs["Output"])


def test_a_cached_step_reports_the_outputs_of_the_run_that_made_them(tmp_path):
    first = run_local({}, tmp_path / "out", pipeline=_pipeline)
    assert first.ok, first.error
    assert {s.name: s.status for s in first.steps} == {"prepare-data": "SUCCESS",
                                                       "train-model": "SUCCESS"}
    again = run_local({}, tmp_path / "out", pipeline=_pipeline)
    assert again.ok, again.error
    assert {s.name: s.status for s in again.steps} == {"prepare-data": "CACHED",
                                                       "train-model": "CACHED"}
    assert again.run_dir is None  # every step cached: kfp.local wrote no run folder

    model = again.output_dir("train-model", "model")
    assert model == first.output_dir("train-model", "model")
    assert (model / "weights").read_text() == "42"
    assert again.artifact_metadata("train-model", "model")["strategy"] == "one device, 42 rows"
    assert (again.output_dir("prepare-data", "report") / "index.html").is_file()
    assert again.parameter_outputs("prepare-data") == {"Output": 42}

    uncached = run_local({}, tmp_path / "out", pipeline=_pipeline, enable_caching=False)
    assert {s.status for s in uncached.steps} == {"SUCCESS"}
    assert uncached.output_dir("train-model", "model").parent.parent == uncached.run_dir
