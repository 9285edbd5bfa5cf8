"""What the images leave out (``image_locks.left_out``: the gkeflow command's own clients and
what no step loads) is imported by no code a step runs: not at module level, not inside a
function, and not by the MLflow client on the calls the steps make.

The left-out distributions are installed here (the command needs them); their import
packages are read from their RECORD, so the check follows the lock's list, not a copy.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap

import pytest

from gkeflow.images import slim_check, warm
from gkeflow.pipelines.targets.image_locks import CLIENT_ONLY, FLAVOURS, NOT_INSTALLED, left_out


def import_packages(distribution: str) -> tuple[str, ...]:
    """The import packages of an installed distribution (``google-cloud-billing`` ->
    ``google.cloud.billing``, ``google.cloud.billing_v1``), from its RECORD."""
    names = set()
    for file in importlib.metadata.distribution(distribution).files or []:
        parts = file.parts
        if (parts[0] == ".." or parts[0].endswith((".dist-info", ".data", ".libs"))
                or "__pycache__" in parts or file.suffix not in (".py", ".so")):
            continue
        module = parts[:-1] if file.name == "__init__.py" else (*parts[:-1],
                                                                 file.name.split(".")[0])
        names.add(".".join(module))
    return tuple(sorted(n for n in names if not any(n.startswith(o + ".") for o in names)))


def left_out_packages() -> tuple[str, ...]:
    """Import packages of what the CPU, GPU and TPU images leave out (the slim image leaves
    out TensorFlow too: gkeflow.images.slim_check covers it)."""
    common = set.intersection(*(set(left_out(f)) for f in FLAVOURS if f != "slim"))
    assert common == set(CLIENT_ONLY + NOT_INSTALLED)
    return tuple(p for name in sorted(common) for p in import_packages(name))


def step_modules() -> set[str]:
    """Every module a step of any image can run: the components (their shells, logic and the
    workloads' entry modules) and the images' own build pass."""
    return {*warm.suite_modules(), "gkeflow.images.warm", "gkeflow.images.slim_check"}


def test_the_left_out_packages_are_found_by_their_import_names():
    packages = left_out_packages()
    assert {"google.cloud.billing_v1", "google.cloud.monitoring_v3", "google.genai", "git",
            "pygments", "markdown_it", "uvicorn", "websockets", "clang"} <= set(packages)


def test_no_step_module_reaches_a_left_out_package_even_inside_a_function():
    modules, chains = slim_check.code_path(step_modules(), left_out_packages())
    assert chains == []
    assert "gkeflow.components.tracking.client" in modules  # MLflow's caller is on the path
    assert "gkeflow.components.scaleout.vertex_launcher" in modules


def test_the_check_catches_an_import_inside_a_function():
    """The same walk flags a package imported only in a function body (MLflow's entities,
    imported by Tracker.log_metrics), naming the chain."""
    _, chains = slim_check.code_path({"gkeflow.components.tracking.steps"},
                                     ("mlflow.entities",))
    assert ["gkeflow.components.tracking.steps", "mlflow.entities"] in chains


IMPORT_PASS = textwrap.dedent("""
    import importlib, json, sys
    from gkeflow.images import slim_check, warm
    with slim_check.blocked(tuple(sys.argv[1:])) as asked:
        for name in [*warm.suite_modules(), *warm.LAZY]:
            importlib.import_module(name)
        import mlflow, mlflow.tracking
        from mlflow import MlflowClient
        MlflowClient("http://127.0.0.1:9")
        steps_asked = list(asked)
        try:  # the blocker sees what a step would ask for
            import git
        except ModuleNotFoundError:
            pass
    print(json.dumps([steps_asked, asked]))
""")


@pytest.mark.parametrize(("images", "also_absent", "asked"), [
    # no JAX in these images: nothing left out is even asked for
    ("cpu-gpu", ("jax", "jaxlib"), []),
    # TensorFlow's lite utilities import JAX when it is there, and JAX's debugger tries
    # pygments inside try/except ImportError: asked, absent, and nothing fails
    ("tpu", (), ["pygments"]),
])
def test_the_tensorflow_images_import_pass_runs_without_the_left_out_packages(
        images, also_absent, asked):
    """What the CPU, GPU and TPU images' build imports (every component module, the lazily
    loaded ones, the MLflow client), with the left-out packages unimportable as in the
    images: all import, and none of them is asked for but an optional one."""
    done = subprocess.run([sys.executable, "-c", IMPORT_PASS, *left_out_packages(),
                           *also_absent],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "GKEFLOW_IMAGE_KIND": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    steps_asked, every_ask = json.loads(done.stdout.splitlines()[-1])
    # (TensorFlow's lite utilities also try JAX inside try/except where it is absent)
    left_out_asked = [name for name in every_ask if name not in also_absent]
    assert [n for n in steps_asked if n not in also_absent] == asked
    assert left_out_asked == [*asked, "git"]


MLFLOW_CALLS = textwrap.dedent("""
    import json, pathlib, sys
    from gkeflow.images import slim_check
    url, work = sys.argv[1], pathlib.Path(sys.argv[2])
    with slim_check.blocked(tuple(sys.argv[3:])) as asked:
        from gkeflow.components.tracking import direct
        from gkeflow.components.tracking.client import open_step_run
        from gkeflow.components.tracking.steps import best_effort
        from gkeflow.components.register.mlflow_registry import MlflowRegistry
        parent = direct.start_pipeline_run(url, "left-out", "run-1", pipeline_name="p")
        tracker = open_step_run("train-model", parent_run_id=parent,
                                environ={"MLFLOW_TRACKING_URI": url})
        tracker.log_params({"epochs": 3})
        tracker.log_metrics({"accuracy": 0.5}, step=1)
        tracker.set_tags({"gkeflow.step": "train-model"})
        tracker.log_dict({"a": 1}, "summary.json")
        tracker.log_text("card", "model_card.md")
        (work / "model").mkdir()
        (work / "model" / "saved_model.pb").write_bytes(b"pb")
        tracker.log_artifact(str(work / "model" / "saved_model.pb"))
        tracker.log_artifacts(str(work / "model"), "model")
        tracker.finish()
        direct.end_pipeline_run(url, parent, True)
        MlflowRegistry("mlflow://" + url.split("://")[1])
    print(json.dumps({"asked": asked, "enabled": tracker.enabled, "run": tracker.run_id,
                      "parent": parent, "best_effort": callable(best_effort)}))
""")


def test_the_mlflow_calls_the_steps_make_need_none_of_the_left_out_packages(mlflow_server,
                                                                           tmp_path):
    """mlflow-skinny's optional git tags (GitPython) and the rest: the client calls gkeflow's
    steps make against a real MLflow server, with the left-out packages unimportable, log
    everything and ask for none of them."""
    done = subprocess.run([sys.executable, "-c", MLFLOW_CALLS, mlflow_server.url,
                           str(tmp_path), *left_out_packages()],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["asked"] == [] and result["enabled"], done.stdout
    run = mlflow_server.run(result["run"])
    assert run["params"]["epochs"] == "3"
    assert run["tags"]["gkeflow.step"] == "train-model"
    assert run["info"]["status"] == "FINISHED"
    assert set(mlflow_server.artifacts(result["run"])) >= {"summary.json", "model_card.md",
                                                           "model/saved_model.pb"}

