"""The slim image (``gkeflow``, no TensorFlow): which steps declare it, proof from the source
that their code paths never reach TensorFlow, and the import pass of its build.

Each slim step's code path is imported in a fresh interpreter where ``import tensorflow``
fails, as it does in the slim image.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from gkeflow.components.images import CPU_IMAGE, GPU_IMAGE, SLIM_IMAGE
from gkeflow.images import slim_check
from tests.conftest import REPO_ROOT

#: Steps that load TensorFlow (train, evaluate, deploy's servability check, in-pipeline
#: prediction) and the image they need; every other step runs in the slim image.
TENSORFLOW_STEPS = {
    "gkeflow.components.train.component:train_model": GPU_IMAGE,
    # model_type auto's candidates (on CPUs the pipeline gives them the CPU image)
    "gkeflow.components.train.candidate_component:train_candidate": GPU_IMAGE,
    "gkeflow.components.scaleout.component:train_model_local_workers": GPU_IMAGE,
    # engine ray: the trials train inside the step (a local run's Ray instance)
    "gkeflow.components.sweep.ray_component:tune_with_ray": GPU_IMAGE,
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
    "gkeflow.components.tracking.component:end_tracking",
    "gkeflow.components.predict.resolve_component:resolve_model",
    "gkeflow.components.predict.vertex_component:batch_predict_vertex",
    "gkeflow.components.sweep.component:select_best_trial",
    "gkeflow.components.sweep.vizier_component:tune_with_vizier",
    "gkeflow.components.scaleout.component:train_model_jobset",
    "gkeflow.components.sweep.rayjob_component:tune_on_kuberay",
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


# -- what the slim image's build prunes (slim_check.SLIM_PRUNED) ------------------------------

PRUNE = REPO_ROOT / "images" / "prune.sh"
TRANSPORTS = [f"google/cloud/{api}/services/{service}/transports/{name}.py"
              for api in ("aiplatform_v1", "aiplatform_v1beta1")
              for service in ("job_service", "model_service")
              for name in ("rest", "rest_asyncio", "grpc")]


def _pruned(tmp_path: Path, kind: str) -> set[str]:
    site = tmp_path / kind / "venv/lib/python3.11/site-packages"
    for name in TRANSPORTS + ["numpy/__init__.py", "pyarrow/__init__.py"]:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("\n", encoding="utf-8")
    done = subprocess.run(["sh", str(PRUNE), str(site)], capture_output=True, text=True,
                          check=False, env={**os.environ, "GKEFLOW_IMAGE_KIND": kind})
    assert done.returncode == 0, done.stderr
    return {name for name in TRANSPORTS if not (site / name).exists()}


def test_prune_removes_the_async_rest_transports_from_the_slim_image_only(tmp_path):
    removed = _pruned(tmp_path, "slim")
    assert removed == {n for n in TRANSPORTS if n.endswith("/rest_asyncio.py")}
    modules = {n.removesuffix(".py").replace("/", ".") for n in TRANSPORTS}
    assert {m for m in modules if slim_check.is_pruned(m)} == {
        n.removesuffix(".py").replace("/", ".") for n in removed}
    assert _pruned(tmp_path, "cpu") == set()


def test_only_the_slim_dockerfile_asks_for_the_slim_pruning():
    asks = {path.name: "GKEFLOW_IMAGE_KIND=slim sh /tmp/prune.sh" in path.read_text()
            for path in (REPO_ROOT / "images").glob("*.Dockerfile")}
    assert asks.pop("slim.Dockerfile") and not any(asks.values()), asks


def test_no_suite_module_selects_the_async_rest_transport():
    """The SDK picks ``rest_asyncio`` only when asked by name or given async REST
    credentials; no module of the suite does either."""
    sources = [p for root in ("components", "images") for p in (REPO_ROOT / root).rglob("*.py")]
    assert len(sources) > 50
    assert [p for p in sources if p.name != "slim_check.py" and re.search(
        r"rest_asyncio|_async_rest_credentials", p.read_text(encoding="utf-8"))] == []


PRUNED_RUN = textwrap.dedent("""
    import http.server, importlib, json, sys, threading
    from gkeflow.images import slim_check, warm

    class Fake(http.server.BaseHTTPRequestHandler):
        seen = []

        def do_GET(self):
            Fake.seen.append(self.path.split("?")[0])
            if "/customJobs/" in self.path:
                body = {"name": self.path.split("?")[0][4:], "state": "JOB_STATE_RUNNING"}
            else:
                body = {"models": []}
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    with slim_check.slim_blocked() as asked:
        names, problems = warm.slim_modules()
        for name in [*names, *warm.SLIM_LAZY, *sys.argv[1:]]:
            importlib.import_module(name)
        from gkeflow.components.cloud.vertex import job_client
        from gkeflow.components.register.vertex import VertexRegistry
        from gkeflow.components.scaleout import vertex_launcher
        from google.cloud import aiplatform_v1
        job = job_client("us-central1", url).get_custom_job(
            name="projects/p/locations/us-central1/customJobs/7")
        registry = VertexRegistry("vertex://projects/p/locations/us-central1",
                                  api_endpoint=url)
        champion = registry.get_by_alias("penguins", "champion")
        registries = [aiplatform_v1.JobServiceClient, aiplatform_v1.ModelServiceClient,
                      aiplatform_v1.PipelineServiceClient]
        print(json.dumps({
            "problems": problems,
            "asked": sorted({".".join(n.split(".")[:3]) for n in asked}),
            "pruned_loaded": sorted(m for m in sys.modules if slim_check.is_pruned(m)),
            "transports": sorted({t for c in registries for t in c._transport_registry}),
            "job": job.state.name, "champion": champion, "seen": Fake.seen}))
""")


def test_the_slim_steps_run_without_what_the_slim_image_prunes():
    """The slim steps' code paths, what they load lazily and the Vertex AI launchers' and
    registry's clients import, and make real REST calls, with the async REST transports
    unimportable as in the slim image; the clients fall back to grpc and rest."""
    done = subprocess.run([sys.executable, "-c", PRUNED_RUN, CUSTOM_JOB_LAUNCHER],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["problems"] == [] and result["pruned_loaded"] == []
    # the clients did ask for them (so the block was in force) and went on without them
    assert result["asked"] == ["google.cloud.aiplatform_v1", "google.cloud.aiplatform_v1beta1"]
    assert result["transports"] == ["grpc", "grpc_asyncio", "rest"]
    assert result["job"] == "JOB_STATE_RUNNING" and result["champion"] is None
    assert result["seen"] == ["/v1/projects/p/locations/us-central1/customJobs/7",
                              "/v1/projects/p/locations/us-central1/models"]
