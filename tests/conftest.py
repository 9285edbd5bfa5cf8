"""Shared fixtures: small CSVs, the bundled data prepared once, a model trained once."""

from __future__ import annotations

import fcntl
import json
import os
import random
import sys
from pathlib import Path

import pytest

from tests.step_site.sitecustomize import HIDDEN as STEP_SITE_HIDDEN

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite runs its tests side by side (pytest-xdist): a local run's steps run one at a time
# here unless a test asks for more (tests/local/test_parallel_steps.py and
# test_candidate_pipeline.py run steps side by side).
os.environ.setdefault("GKEFLOW_LOCAL_STEPS", "1")
# Local runs fork their steps from the tests' own servers (step_site/step_zygote.py), shared by
# the whole run, not from one server per run (tests/unit/test_local_forks.py and
# tests/local/test_forked_steps.py start gkeflow run's own).
os.environ.setdefault("GKEFLOW_LOCAL_FORKS", "0")
# Tables render at the width a pipe gets whoever runs the tests (pytest-xdist's workers set
# COLUMNS=80); tests of the width options set COLUMNS themselves.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

REPO_ROOT = Path(__file__).resolve().parent.parent
# Bytecode caches on, also where the environment turns them off (PYTHONDONTWRITEBYTECODE):
# otherwise each test worker and each process the tests start compiles gkeflow and the test
# modules afresh (collecting the suite took 20 s instead of 12). What a test runs "as in
# the images" sets the variable for its own processes.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
#: First on the PYTHONPATH of every process the tests start: what the images leave out stays
#: out of the steps (tests/step_site/sitecustomize.py).
STEP_SITE = Path(__file__).resolve().parent / "step_site"
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(STEP_SITE), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                       if p and p != str(STEP_SITE)]])
for _name in STEP_SITE_HIDDEN:  # pytest-xdist's workers start with it too: not hidden here
    if _name in sys.modules and sys.modules[_name] is None:
        del sys.modules[_name]
#: API contracts vendored with their source and commit (tests/contracts/README.md).
CONTRACTS = REPO_ROOT / "tests" / "contracts"


@pytest.fixture
def write_csv(tmp_path):
    """Write text to a CSV file under tmp_path and return its path."""

    def _write(text: str | bytes, name: str = "data.csv") -> Path:
        path = tmp_path / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return _write


def make_churn_csv(path: Path, rows: int = 400, seed: int = 7) -> Path:
    """A classification CSV unlike penguins: mixed types, string labels, missing values.

    The label follows a rule over two columns, so a model can learn it.
    """
    rng = random.Random(seed)
    plans = ["basic", "plus", "premium"]
    regions = ["north", "south", "east", "west"]
    lines = ["customer_id,tenure months,monthly-fee,plan,region,support_calls,status"]
    for i in range(rows):
        tenure = rng.randint(1, 72)
        fee = round(rng.uniform(10, 120), 2)
        plan = rng.choice(plans)
        region = rng.choice(regions)
        calls = rng.randint(0, 9)
        status = "churned" if (calls >= 5 or (tenure < 12 and plan == "basic")) else "stayed"
        cells = [f"c{i:05d}", str(tenure), str(fee), plan, region, str(calls), status]
        if rng.random() < 0.05:
            cells[2] = ""
        if rng.random() < 0.05:
            cells[4] = "NA"
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def churn_csv(tmp_path_factory) -> Path:
    return make_churn_csv(tmp_path_factory.mktemp("churn") / "customer churn.csv")


@pytest.fixture(scope="session")
def prepared_penguins(tmp_path_factory):
    """The bundled penguins data prepared once: (dataset_dir, PrepareResult)."""
    from gkeflow.components.prepare.logic import EMBEDDED_PENGUINS, prepare

    out = tmp_path_factory.mktemp("prepared") / "dataset"
    result = prepare(EMBEDDED_PENGUINS, out, "species")
    return out, result


@pytest.fixture(scope="session")
def trained_penguins(prepared_penguins, tmp_path_factory):
    """A model trained once on the prepared penguins: (model_dir, TrainResult)."""
    from gkeflow.components.train.logic import TrainParams, train

    dataset_dir, prepared = prepared_penguins
    model_dir = tmp_path_factory.mktemp("trained") / "model"
    result = train(dataset_dir, prepared.schema, model_dir, TrainParams(epochs=8))
    return model_dir, result


@pytest.fixture(scope="module")
def registered(trained_penguins, tmp_path_factory):
    """The trained penguins model registered as penguins-classifier version 1 in a local
    registry: (registry URI, model directory)."""
    from gkeflow.components.register.local_registry import LocalRegistry

    model_dir, _ = trained_penguins
    root = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{root / 'registry.db'}"
    LocalRegistry(uri).register("penguins-classifier", str(model_dir), {}, run_id="run-1")
    return uri, model_dir


@pytest.fixture(scope="session")
def weak_penguins(prepared_penguins, tmp_path_factory):
    """A barely trained model on the prepared penguins: one epoch at a tiny learning rate."""
    from gkeflow.components.train.logic import TrainParams, train

    dataset_dir, prepared = prepared_penguins
    model_dir = tmp_path_factory.mktemp("weak") / "model"
    train(dataset_dir, prepared.schema, model_dir, TrainParams(epochs=1, learning_rate=1e-6))
    return model_dir


def once_per_session(tmp_path_factory, worker_id: str, name: str, build):
    """``build(folder)`` once for the whole test session, pytest-xdist's workers included:
    the first worker to ask builds it under a lock, the others wait for it and read what it
    returned (JSON). Without xdist it is an ordinary session fixture."""
    if worker_id == "master":
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent  # this session's folder, all workers
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / f"{name}.json"
        if not done.exists():
            folder = shared / name
            folder.mkdir()
            done.write_text(json.dumps(build(folder)))
        return json.loads(done.read_text())


@pytest.fixture(scope="session")
def penguins_run(tmp_path_factory, worker_id):
    """`gkeflow run --deploy` on the bundled penguins, once per session, trained by two local
    worker processes (MultiWorkerMirroredStrategy) with an L4 asked for (which a machine
    without a GPU cannot give), registered whatever its accuracy and
    deployed to the local stand-in: (output directory, what the command printed). The
    scale-out, prediction and local deployment tests share it, whichever worker runs them;
    they add runs and aliases to it, never change what it trained or deployed."""

    def run(folder: Path) -> tuple[str, str]:
        from click.testing import CliRunner

        from gkeflow.pipelines.cli.main import main

        output = folder / "out"
        result = CliRunner().invoke(main, [
            "run", "--output", str(output), "--epochs", "3", "--min-accuracy", "0",
            "--no-cache", "--compute", "train-model.replicas=2",
            "--compute", "train-model.accelerator=nvidia-l4", "--deploy"],
            catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return str(output), result.output

    output, printed = once_per_session(tmp_path_factory, worker_id, "penguins-run", run)
    return Path(output), printed


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server for the session (tests/integration/mlflow_server.py)."""
    from tests.integration.mlflow_server import start_or_skip

    server = start_or_skip(tmp_path_factory.mktemp("mlflow"))
    yield server
    server.stop()


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (``make test``): one worker per core and one more. With one per core the
    cores sat idle a fifth of the time while workers waited on step processes, servers and
    the timeouts under test; the extra worker fills it (bench/RESULTS.md)."""
    return len(os.sched_getaffinity(0)) + 1


#: Where the steps that import TensorFlow start from when tests run pipelines
#: (tests/step_site/step_zygote.py): unit and compile tests alone do not start it.
_ZYGOTE_FOLDERS = ("local", "cli", "integration", "release", "images", "examples")


@pytest.fixture(scope="session", autouse=True)
def step_zygote(request):
    """Fork servers for the steps kfp.local runs and the ``gkeflow`` processes tests start
    (tests/step_site/step_zygote.py): each such process is a fork of one that imported
    TensorFlow and Keras (or JAX, or the command) once, not a fresh interpreter. The
    workers of one pytest-xdist run share one set (the first worker that needs them starts
    them; they end with the run). A server answers once its imports are done; processes
    that start before run the ordinary way. GKEFLOW_STEP_ZYGOTE=0 turns them off (every step
    and command a fresh interpreter, as in the images)."""
    import shutil
    import tempfile

    from tests.step_site import step_zygote

    wanted = os.environ.get(step_zygote.ADDRESS_VARIABLE) != "0" and any(
        item.path.relative_to(REPO_ROOT / "tests").parts[0] in _ZYGOTE_FOLDERS
        or item.get_closest_marker("slow") for item in request.session.items
        if item.path.is_relative_to(REPO_ROOT / "tests"))
    if not wanted:
        os.environ.pop(step_zygote.ADDRESS_VARIABLE, None)
        yield None
        return
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:  # short: a socket path is < 108 bytes
        folder = os.path.join(tempfile.gettempdir(), f"gkeflow-zygote-{run[:12]}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "started"), "a") as started:
            fcntl.flock(started, fcntl.LOCK_EX)
            if not os.path.getsize(started.name):
                step_zygote.start(folder, watch=os.getppid())  # the run's controller
                started.write("yes")
        servers = []
    else:
        folder = tempfile.mkdtemp(prefix="gkeflow-zygote-")
        servers = step_zygote.start(folder)
    os.environ[step_zygote.ADDRESS_VARIABLE] = folder
    yield folder
    os.environ.pop(step_zygote.ADDRESS_VARIABLE, None)
    for server in servers:
        server.kill()
        server.wait()
    if servers:
        shutil.rmtree(folder, ignore_errors=True)
