"""The TPU image builds from its hashed lock, passes its import check, trains on Keras' JAX
backend, and the SavedModel it exports loads in the evaluation image's TensorFlow.

No TPU here: JAX runs on the CPU when it finds none, so the suite's own training
(``gkeflow.components.train.logic.train``, backend jax) runs inside the image on the prepared
penguins and exports the model; the host's TensorFlow (the CPU image's version, the same as
the TPU image's) loads it through ``ExportedModel``, the loader evaluation uses. Nothing runs
on a TPU. ``TPU_SKIP_MDS_QUERY=1`` is set for these runs as for the build's import pass: this
machine has no metadata server. ``make image-test-tpu`` runs this (it downloads about 0.5 GB).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.images.conftest import TAG, USER_CODE
from tests.images.rootfs import image_size, run_in_image

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

TPU_REFERENCE = f"localhost/gkeflow-tpu:{TAG}"
NO_METADATA_SERVER = ["env", "TPU_SKIP_MDS_QUERY=1"]
#: A pod has /sys; libtpu's allocator reads the CPU count there and aborts without it.
SYS = {"/sys": Path("/sys")}


@pytest.fixture(scope="module")
def tpu_image() -> str:
    from gkeflow.pipelines.targets.image_build import build_image

    started = time.monotonic()
    digest = build_image("tpu", TPU_REFERENCE, None, [USER_CODE / "penguin_head.py"],
                         builder="podman", push=False, echo=lambda line: print(line, flush=True))
    assert digest.startswith("sha256:") and len(digest) == 71
    print(f"TPU image: {image_size(TPU_REFERENCE) / 1e9:.2f} GB uncompressed, built in "
          f"{time.monotonic() - started:.0f} s")
    return TPU_REFERENCE


def test_tpu_image_imports_jax_for_tpu_at_the_locked_versions(tpu_image):
    probe = ("import importlib.metadata as m, jax, tensorflow as tf, penguin_head, "
             "gkeflow.components.train.tpu, gkeflow.components.train.logic; "
             "print(tf.__version__, jax.__version__, m.version('libtpu'), "
             "jax.devices()[0].platform)")
    done = run_in_image(tpu_image, [*NO_METADATA_SERVER, "python", "-c", probe], SYS)
    assert done.returncode == 0, done.stdout
    assert "Permission denied" not in done.stdout  # libtpu's logs are writable by the user
    tensorflow, jax, libtpu, platform = done.stdout.split()[-4:]
    locked = (REPO_ROOT / "images" / "requirements-tpu.lock").read_text(encoding="utf-8")
    assert f"tensorflow-cpu=={tensorflow} " in locked and f"jax=={jax} " in locked
    assert f"libtpu=={libtpu} " in locked
    assert platform == "cpu"  # no TPU on this machine: JAX falls back to the CPU
    print(f"TPU image: jax {jax}, libtpu {libtpu}, tensorflow-cpu {tensorflow}")


def test_a_jax_model_trained_in_the_tpu_image_loads_in_the_evaluation_tensorflow(
        tpu_image, prepared_penguins, tmp_path):
    import shutil

    import tensorflow as tf

    from gkeflow.components.train.exported import ExportedModel

    dataset_dir, prepared = prepared_penguins
    work = tmp_path / "work"
    shutil.copytree(dataset_dir, work / "dataset")
    (work / "schema.json").write_text(prepared.schema.to_json(), encoding="utf-8")
    for path in [work, *work.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)  # the image's user (uid 10001) writes
    script = (
        "from gkeflow.components.train.backend import select_backend; select_backend('jax'); "
        "import json, pathlib, tensorflow as tf; "
        "from gkeflow.components.prepare.schema import Schema; "
        "from gkeflow.components.train.exported import ExportedModel; "
        "from gkeflow.components.train.logic import TrainParams, train; "
        "w = pathlib.Path('/work'); "
        "schema = Schema.from_json((w / 'schema.json').read_text()); "
        "result = train(w / 'dataset', schema, w / 'model', TrainParams(epochs=2, "
        "backend='jax')); "
        "rows = [{'bill_length_mm': 39.1, 'bill_depth_mm': 18.7, 'flipper_length_mm': 181.0, "
        "'body_mass_g': 3750.0, 'island': 'Torgersen', 'sex': 'male', 'year': 2007}]; "
        "(w / 'written.json').write_text(json.dumps({'tf': tf.__version__, "
        "'strategy': result.strategy, 'labels': ExportedModel(w / 'model').predict_rows(rows)}))")
    done = run_in_image(tpu_image, [*NO_METADATA_SERVER, "python", "-c", script],
                        {**SYS, "/work": work})
    assert done.returncode == 0, done.stdout[-3000:]
    written = json.loads((work / "written.json").read_text())
    assert written["strategy"] == "JAX on one cpu device"

    loaded = ExportedModel(work / "model")
    row = {"bill_length_mm": 39.1, "bill_depth_mm": 18.7, "flipper_length_mm": 181.0,
           "body_mass_g": 3750.0, "island": "Torgersen", "sex": "male", "year": 2007}
    assert loaded.predict_rows([row]) == written["labels"]
    assert loaded.label_vocabulary == sorted(loaded.label_vocabulary)
    print(f"SavedModel written by TensorFlow {written['tf']} ({written['strategy']}) loaded "
          f"by TensorFlow {tf.__version__}")
