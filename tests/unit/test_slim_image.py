"""The slim image (``gkeflow``, no TensorFlow): which steps declare it, proof from the source
that their code paths never reach TensorFlow, and the import pass of its build.

Each slim step's code path is imported in a fresh interpreter where ``import tensorflow``
fails, as it does in the slim image.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE, SLIM_IMAGE
from gkeflow.images import slim_check

#: Steps that load TensorFlow (train, evaluate, deploy's servability check, in-pipeline
#: prediction) and the image they need; every other step runs in the slim image.
TENSORFLOW_STEPS = {
    "gkeflow.components.train.component:train_model": GPU_IMAGE,
    "gkeflow.components.scaleout.component:train_model_local_workers": GPU_IMAGE,
    "gkeflow.components.evaluate.component:evaluate_model": CPU_IMAGE,
    "gkeflow.components.deploy.component:deploy_model": CPU_IMAGE,
    "gkeflow.components.deploy.vertex_component:deploy_model": CPU_IMAGE,
    "gkeflow.components.predict.component:predict_batch": CPU_IMAGE,
    "gkeflow.components.predict.component:report_predictions": CPU_IMAGE,
}
SLIM_STEPS = {
    "gkeflow.components.fingerprint.component:fingerprint_data",
    "gkeflow.components.prepare.component:prepare_data",
    "gkeflow.components.prepare.fanout_component:plan_prepare",
    "gkeflow.components.prepare.fanout_component:prepare_group",
    "gkeflow.components.prepare.fanout_component:merge_prepared",
    "gkeflow.components.register.component:register_model",
    "gkeflow.components.register.vertex_component:register_model",
    "gkeflow.components.notify.component:notify_run",
    "gkeflow.components.predict.resolve_component:resolve_model",
    "gkeflow.components.predict.vertex_component:batch_predict_vertex",
    "gkeflow.components.sweep.component:select_best_trial",
    "gkeflow.components.sweep.vizier_component:tune_with_vizier",
    "gkeflow.components.scaleout.component:train_model_jobset",
}
#: The Vertex AI CustomJob launcher (a module the compiled step runs with ``python -m``).
CUSTOM_JOB_LAUNCHER = "gkeflow.components.scaleout.vertex_launcher"

BLOCKED_RUN = textwrap.dedent("""
    import importlib, sys
    from gkeflow.images import slim_check
    with slim_check.tensorflow_blocked():
        for name in sys.argv[1:]:
            importlib.import_module(name)
    loaded = [m for m in sys.modules if m.split(".")[0] in slim_check.TENSORFLOW]
    assert not loaded, loaded
    print("ok")
""")


def _images() -> dict[str, str]:
    return {name: slim_check.image_of(c) for name, c in slim_check.components()}


def test_each_component_declares_the_image_kind_it_needs():
    images = _images()
    assert {name for name, image in images.items() if image == SLIM_IMAGE} == SLIM_STEPS
    assert {name: images[name] for name in TENSORFLOW_STEPS} == TENSORFLOW_STEPS
    assert set(images) == SLIM_STEPS | set(TENSORFLOW_STEPS)


def test_no_slim_step_reaches_tensorflow_in_its_source():
    assert slim_check.problems(SLIM_IMAGE) == []
    assert slim_check.tensorflow_paths({CUSTOM_JOB_LAUNCHER}) == []


def test_a_lazy_import_inside_a_function_counts():
    # reader imports TensorFlow only inside its functions; prepare's writer never does
    assert slim_check.tensorflow_paths({"gkeflow.components.prepare.reader"}) == [
        ["gkeflow.components.prepare.reader", "tensorflow"]]
    chains = slim_check.tensorflow_paths({"gkeflow.components.evaluate.logic"})
    assert ["gkeflow.components.evaluate.logic", "tensorflow"] in chains
    assert slim_check.tensorflow_paths({"gkeflow.components.prepare.records"}) == []


def test_the_slim_steps_code_paths_import_without_tensorflow():
    # one interpreter for all of them: the blocker fails any TensorFlow import, whatever
    # was imported before it
    wanted = [CUSTOM_JOB_LAUNCHER]
    for step, roots in sorted(slim_check.slim_roots(SLIM_IMAGE).items()):
        modules, chains = slim_check.code_path(roots)
        assert chains == [] and roots <= set(modules), step
        wanted += [step.partition(":")[0], *modules]
    done = subprocess.run([sys.executable, "-c", BLOCKED_RUN, *dict.fromkeys(wanted)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_blocker_really_blocks():
    done = subprocess.run([sys.executable, "-c", BLOCKED_RUN,
                           "gkeflow.components.train.checkpoint"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode != 0
    assert "No module named 'keras' (not in the slim image)" in done.stderr


def _warm(tmp_path, *modules: str):
    listing = tmp_path / "modules.txt"
    listing.write_text("".join(f"{m}\n" for m in modules), encoding="utf-8")
    env = {**os.environ, "GKEFLOW_IMAGE_KIND": "slim",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "gkeflow.images.warm", str(listing)],
                          capture_output=True, text=True, timeout=300, check=False, env=env)


def test_the_slim_builds_import_pass_passes(tmp_path):
    (tmp_path / "plain_helper.py").write_text("import json\n", encoding="utf-8")
    done = _warm(tmp_path, "plain_helper")
    assert done.returncode == 0, done.stderr
    assert "no TensorFlow" in done.stdout


def test_a_users_model_module_is_left_to_the_tensorflow_images(tmp_path):
    (tmp_path / "tf_model.py").write_text("import keras\n", encoding="utf-8")
    done = _warm(tmp_path, "tf_model")
    assert done.returncode == 0, done.stderr
    assert "note: tf_model imports keras: usable in the CPU and GPU images' steps only" \
        in done.stdout


def test_the_slim_builds_import_pass_fails_naming_the_module(tmp_path):
    (tmp_path / "broken_helper.py").write_text("import not_installed_anywhere\n",
                                               encoding="utf-8")
    done = _warm(tmp_path, "broken_helper")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "cannot import broken_helper: ModuleNotFoundError: No module named "
        "'not_installed_anywhere'")


def test_a_slim_step_that_reaches_tensorflow_is_named_with_its_chain(monkeypatch):
    roots = {"gkeflow.components.register.logic", "gkeflow.components.prepare.reader"}
    monkeypatch.setattr(slim_check, "slim_roots", lambda image: {"x.component:step": roots})
    assert slim_check.problems(SLIM_IMAGE) == [
        "x.component:step runs in the slim image but imports TensorFlow: "
        "gkeflow.components.prepare.reader -> tensorflow"]
