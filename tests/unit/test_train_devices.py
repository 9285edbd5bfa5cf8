"""Strategy, precision and GPU decisions from device facts (no hardware needed)."""

from __future__ import annotations

import json

import pytest

from gkeflow.components.train.devices import (
    Devices,
    choose_jit,
    choose_precision,
    plan_strategy,
    workers_in_tf_config,
)

ONE_CPU = Devices()
TWO_GPUS = Devices(gpus=["/device:GPU:0", "/device:GPU:1"], gpu_capabilities=[(8, 0), (8, 0)])


def tf_config(workers: int) -> str:
    return json.dumps({"cluster": {"worker": [f"w{i}:2222" for i in range(workers)]},
                       "task": {"type": "worker", "index": 0}})


def test_cpu_or_single_gpu_uses_the_default_strategy():
    assert plan_strategy(ONE_CPU).kind == "default"
    one_gpu = Devices(gpus=["/device:GPU:0"], gpu_capabilities=[(7, 5)])
    plan = plan_strategy(one_gpu)
    assert plan.kind == "default" and plan.devices == ("/device:GPU:0",)


def test_several_gpus_use_mirrored_strategy():
    plan = plan_strategy(TWO_GPUS)
    assert plan.kind == "mirrored" and plan.devices == tuple(TWO_GPUS.gpus)


def test_several_logical_cpus_use_mirrored_strategy():
    cpus = Devices(cpus=["/device:CPU:0", "/device:CPU:1"])
    assert plan_strategy(cpus).kind == "mirrored"


def test_tf_config_with_several_workers_uses_multi_worker():
    plan = plan_strategy(TWO_GPUS, tf_config(3))
    assert plan.kind == "multi_worker_mirrored" and plan.workers == 3
    assert plan_strategy(ONE_CPU, tf_config(1)).kind == "default"
    chief_and_worker = json.dumps({"cluster": {"chief": ["c:1"], "worker": ["w:1"]}})
    assert workers_in_tf_config(chief_and_worker) == 2


def test_invalid_tf_config_is_a_clear_error():
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        plan_strategy(ONE_CPU, "{not json")


@pytest.mark.parametrize("capabilities, expected", [
    ([(8, 0)], "mixed_bfloat16"), ([(9, 0), (9, 0)], "mixed_bfloat16"),
    ([(7, 5)], "mixed_float16"), ([(7, 0)], "mixed_float16"),
    ([(6, 1)], "float32"), ([(8, 0), (7, 5)], "mixed_float16"),
])
def test_auto_precision_follows_compute_capability(capabilities, expected):
    gpus = Devices(gpus=[f"/device:GPU:{i}" for i in range(len(capabilities))],
                   gpu_capabilities=capabilities)
    assert choose_precision("auto", gpus) == expected


def test_precision_on_cpu_and_explicit_choices():
    assert choose_precision("auto", ONE_CPU) == "float32"
    assert choose_precision("mixed_float16", ONE_CPU) == "mixed_float16"
    with pytest.raises(ValueError, match="unknown precision"):
        choose_precision("fp8", ONE_CPU)


def test_jit_compile_defaults_on_for_gpus_only():
    assert choose_jit("auto", TWO_GPUS) is True
    assert choose_jit("auto", ONE_CPU) is False
    assert choose_jit("on", ONE_CPU) is True and choose_jit("off", TWO_GPUS) is False
    with pytest.raises(ValueError):
        choose_jit("maybe", ONE_CPU)


def test_only_the_chief_writes_shared_outputs():
    from gkeflow.components.train.devices import is_chief

    assert is_chief("")
    workers = json.loads(tf_config(2))
    assert is_chief(json.dumps(workers))
    workers["task"]["index"] = 1
    assert not is_chief(json.dumps(workers))
    with_chief = {"cluster": {"chief": ["c:1"], "worker": ["w:1"]},
                  "task": {"type": "worker", "index": 0}}
    assert not is_chief(json.dumps(with_chief))
    with_chief["task"] = {"type": "chief", "index": 0}
    assert is_chief(json.dumps(with_chief))
