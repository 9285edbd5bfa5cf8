"""Gradient-boosted trees across two worker processes (XGBoost's collective formed from
``TF_CONFIG``, as every multi-worker engine gives it): both workers grow the same trees from
their halves of the rows and the chief's model serves, within one eval row of one
worker trained on all rows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.mlflow_server import free_port

pytestmark = pytest.mark.slow


def test_two_workers_grow_the_same_trees_as_good_as_one(prepared_penguins, tmp_path):
    dataset_dir, prepared = prepared_penguins
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(prepared.schema.to_json())
    # only the chief's port is bound (by XGBoost's tracker); the other is an address only
    hosts = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from gkeflow.components.prepare.logic import Schema\n"
        "from gkeflow.components.train.logic import TrainParams, train\n"
        "result = train(Path(sys.argv[1]), Schema.load(Path(sys.argv[2])), Path(sys.argv[3]),"
        " TrainParams(model_type='gbdt', gbdt_rounds=60, gbdt_early_stopping_rounds=20))\n"
        "print('accuracy', result.metrics.get('eval_accuracy'))\n")
    procs = []
    for index in range(2):
        env = {**os.environ, "TF_CONFIG": json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}),
            "CUDA_VISIBLE_DEVICES": ""}
        procs.append(subprocess.Popen(
            [sys.executable, "-c", code, str(dataset_dir), str(schema_file),
             str(tmp_path / f"model-{index}")], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert "worker 0 of 2" in outputs[0] and "worker 1 of 2" in outputs[1]
    forests = [re.search(r"worker \d: forest (\w+)", out).group(1) for out in outputs]
    assert forests[0] == forests[1]  # the same forest on both workers
    assert not (tmp_path / "model-1").exists()  # only the chief exports
    # the chief's model against one worker trained on all rows, same settings: within one
    # eval row of accuracy (the sketches of two shards differ a little from one of all rows)
    from gkeflow.components.train.logic import TrainParams, train

    single = train(dataset_dir, prepared.schema, tmp_path / "single",
                   TrainParams(model_type="gbdt", gbdt_rounds=60, gbdt_early_stopping_rounds=20))
    accuracy = float(outputs[0].rsplit("accuracy", 1)[1].split()[0])
    eval_rows = prepared.split_rows["eval"]
    assert abs(accuracy - single.metrics["eval_accuracy"]) <= 1 / eval_rows + 1e-9, (
        accuracy, single.metrics, outputs[0][-2000:])
    assert Path(tmp_path / "model-0" / "saved_model.pb").is_file()
