"""TPU training decisions at their boundaries: which host has a TPU, the resolver arguments,
the calls made to TensorFlow's TPU API, static batches, precision and steps per execution.

No TPU exists where these run: TensorFlow is handed to ``make_tpu_strategy`` and
``serve_tpu_host`` as a recorder of the calls they make.
"""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest

from gkeflow.components.train.devices import (
    Devices,
    choose_jit,
    choose_precision,
    plan_strategy,
    writes_outputs,
)
from gkeflow.components.train.logic import TrainParams
from gkeflow.components.train.tpu import (
    ResolverPlan,
    TpuHost,
    TpuUnavailableError,
    choose_steps_per_execution,
    find_tpu,
    make_tpu_strategy,
    plan_resolver,
    reachable,
    serve_tpu_host,
    static_batches,
    tpu_device_files,
    wait_while_alive,
    wants_tpu,
)

FOUR_HOSTS = {"TPU_ACCELERATOR_TYPE": "v6e-16", "TPU_WORKER_ID": "0",
              "TPU_WORKER_HOSTNAMES": "train-0-0.svc,train-0-1.svc,train-0-2.svc,train-0-3.svc"}


# -- is there a TPU ------------------------------------------------------------------------------
def test_no_tpu_variables_and_no_chips_is_no_tpu():
    assert find_tpu({}, []) is None
    assert find_tpu({"TPU_WORKER_ID": "0"}, []) is None  # a stray id names no accelerator


def test_a_single_host_tpu_from_its_accelerator_type_or_its_chips():
    host = find_tpu({"TPU_ACCELERATOR_TYPE": "v5litepod-4"})
    assert host == TpuHost("v5litepod-4") and host.hosts == 1
    chips = find_tpu({}, ["/dev/vfio/0", "/dev/vfio/1", "/dev/vfio/2", "/dev/vfio/3"])
    assert chips.chips_here == 4 and chips.accelerator_type == ""


def test_device_files_of_both_kinds_are_found(tmp_path):
    (tmp_path / "vfio").mkdir()
    for name in ("accel0", "accel1", "vfio/0", "vfio/vfio", "null"):
        (tmp_path / name).touch()
    assert [p.removeprefix(str(tmp_path)) for p in tpu_device_files(str(tmp_path))] == [
        "/accel0", "/accel1", "/vfio/0"]


def test_a_multi_host_slice_from_the_variables_gke_sets():
    host = find_tpu({**FOUR_HOSTS, "TPU_WORKER_ID": "2"})
    assert host.hosts == 4 and host.worker_id == 2 and host.hostnames[2] == "train-0-2.svc"


@pytest.mark.parametrize("env, message", [
    ({**FOUR_HOSTS, "TPU_WORKER_ID": "4"}, "outside TPU_WORKER_HOSTNAMES"),
    ({**FOUR_HOSTS, "TPU_WORKER_ID": "one"}, "not a number"),
])
def test_inconsistent_tpu_variables_are_one_line_errors(env, message):
    with pytest.raises(TpuUnavailableError, match=message) as caught:
        find_tpu(env)
    assert "\n" not in str(caught.value)


def test_strategy_tpu_without_a_tpu_names_the_fix_in_one_line():
    with pytest.raises(TpuUnavailableError) as caught:
        wants_tpu("tpu", None)
    assert "\n" not in str(caught.value)
    assert "no TPU" in str(caught.value) and "compute profile" in str(caught.value)


def test_auto_takes_the_tpu_when_there_is_one():
    assert wants_tpu("auto", TpuHost("v6e-8")) is True
    assert wants_tpu("auto", None) is False
    assert wants_tpu("tpu", TpuHost("v6e-8")) is True
    with pytest.raises(ValueError, match="unknown strategy"):
        wants_tpu("mirrored-ish", None)


# -- how TensorFlow reaches it -------------------------------------------------------------------
def test_a_single_host_resolves_the_local_tpu():
    plan = plan_resolver(TpuHost("v6e-8"))
    assert plan == ResolverPlan("local", "client", 0, ())
    alone = find_tpu({"TPU_ACCELERATOR_TYPE": "v6e-8", "TPU_WORKER_HOSTNAMES": "localhost",
                      "TPU_WORKER_ID": "0"})
    assert plan_resolver(alone) == plan


def test_a_multi_host_slice_resolves_every_host_in_worker_order():
    plan = plan_resolver(find_tpu(FOUR_HOSTS))
    assert plan.role == "client" and plan.task_index == 0
    assert plan.tpu == ("grpc://train-0-0.svc:8470,grpc://train-0-1.svc:8470,"
                        "grpc://train-0-2.svc:8470,grpc://train-0-3.svc:8470")
    assert plan.endpoints[3] == "train-0-3.svc:8470"
    other = plan_resolver(find_tpu({**FOUR_HOSTS, "TPU_WORKER_ID": "3"}))
    assert other.role == "server" and other.task_index == 3 and other.tpu == plan.tpu


def test_multislice_is_refused_for_tensorflow():
    with pytest.raises(TpuUnavailableError, match="Multislice") as caught:
        plan_resolver(find_tpu({**FOUR_HOSTS, "MEGASCALE_NUM_SLICES": "2"}))
    assert "replicas: 1" in str(caught.value)


class RecordingTf:
    """The parts of TensorFlow's TPU API that gkeflow calls, recording each call."""

    def __init__(self):
        self.calls: list[tuple] = []
        record = self._record
        self.distribute = SimpleNamespace(
            cluster_resolver=SimpleNamespace(TPUClusterResolver=record("resolver")),
            TPUStrategy=record("strategy"), Server=record("server"))
        self.config = SimpleNamespace(experimental_connect_to_cluster=record("connect"))
        self.tpu = SimpleNamespace(
            experimental=SimpleNamespace(initialize_tpu_system=record("initialize")))
        self.train = SimpleNamespace(ClusterSpec=lambda spec: ("ClusterSpec", spec))

    def _record(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return f"<{name}>"
        return call


def test_the_recorder_offers_only_real_tensorflow_calls_with_their_real_keywords():
    import inspect

    import tensorflow as tf

    keywords = {
        tf.distribute.cluster_resolver.TPUClusterResolver: {"tpu"},
        tf.config.experimental_connect_to_cluster: {"job_name", "task_index"},
        tf.tpu.experimental.initialize_tpu_system: set(),
        tf.distribute.TPUStrategy: set(),
        tf.distribute.Server: {"job_name", "task_index", "protocol", "start"},
        tf.train.ClusterSpec: set(),
    }
    for api, names in keywords.items():
        assert names <= set(inspect.signature(api).parameters), api


def test_the_local_tpu_is_connected_initialised_then_given_to_tpu_strategy():
    tf = RecordingTf()
    strategy = make_tpu_strategy(plan_resolver(TpuHost("v5litepod-4")), tf)
    assert strategy == "<strategy>"
    assert tf.calls == [
        ("resolver", (), {"tpu": "local"}),
        ("connect", ("<resolver>",), {}),
        ("initialize", ("<resolver>",), {}),
        ("strategy", ("<resolver>",), {}),
    ]


def test_worker_0_of_a_slice_joins_it_as_task_0():
    tf = RecordingTf()
    plan = plan_resolver(find_tpu(FOUR_HOSTS))
    make_tpu_strategy(plan, tf)
    assert tf.calls[0] == ("resolver", (), {"tpu": plan.tpu})
    assert tf.calls[1] == ("connect", ("<resolver>",), {"job_name": "worker", "task_index": 0})
    with pytest.raises(ValueError, match="only worker 0"):
        make_tpu_strategy(plan_resolver(find_tpu({**FOUR_HOSTS, "TPU_WORKER_ID": "1"})), tf)


def test_other_hosts_serve_their_chips_until_worker_0_has_gone():
    tf = RecordingTf()
    plan = plan_resolver(find_tpu({**FOUR_HOSTS, "TPU_WORKER_ID": "2"}))
    answers = iter([True, True, False, False, False])
    serve_tpu_host(plan, tf, coordinator_alive=lambda: next(answers), poll_s=0.0)
    assert tf.calls == [("server", (("ClusterSpec", {"worker": list(plan.endpoints)}),),
                         {"job_name": "worker", "task_index": 2, "protocol": "grpc",
                          "start": True})]
    assert next(answers, "all used") == "all used"


def test_waiting_counts_only_misses_in_a_row_after_worker_0_was_seen():
    answers = iter([False, False, True, False, True, False, False, False, True])
    checks = wait_while_alive(lambda: next(answers), 0.0, 3, sleep=lambda s: None)
    assert checks == 8  # two misses before worker 0 came up do not count; one blip resets


def test_reachable_probes_a_real_listener():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    assert reachable(f"127.0.0.1:{port}")
    listener.close()
    assert not reachable(f"127.0.0.1:{port}", timeout_s=1.0)


def test_a_tpu_plan_is_tpu_strategy_whatever_tf_config_says():
    workers = json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                          "task": {"type": "worker", "index": 0}})
    plan = plan_strategy(Devices(), workers, plan_resolver(find_tpu(FOUR_HOSTS)))
    assert plan.kind == "tpu" and plan.workers == 4
    assert plan.description == "TPUStrategy over 4 TPU hosts"
    assert plan_strategy(Devices(), "", ResolverPlan("local")).description == (
        "TPUStrategy on the local TPU")


def test_only_worker_0_of_a_slice_publishes_outputs():
    assert writes_outputs({}) and writes_outputs({"TPU_WORKER_ID": "0"})
    assert not writes_outputs({"TPU_WORKER_ID": "3"})
    worker = json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                         "task": {"type": "worker", "index": 1}})
    assert not writes_outputs({"TF_CONFIG": worker, "TPU_WORKER_ID": "0"})


# -- precision, XLA and steps --------------------------------------------------------------------
def test_auto_precision_on_a_tpu_is_bfloat16_and_explicit_choices_stand():
    assert choose_precision("auto", Devices(), on_tpu=True) == "mixed_bfloat16"
    assert choose_precision("float32", Devices(), on_tpu=True) == "float32"
    assert choose_precision("auto", Devices()) == "float32"


def test_auto_jit_is_off_on_a_tpu_which_compiles_every_step_itself():
    gpu = Devices(gpus=["/device:GPU:0"], gpu_capabilities=[(8, 0)])
    assert choose_jit("auto", gpu) is True
    assert choose_jit("auto", gpu, on_tpu=True) is False
    assert choose_jit("on", Devices(), on_tpu=True) is True


@pytest.mark.parametrize("setting, on_tpu, steps, expected", [
    (0, True, 100, 32), (0, True, 5, 5), (0, True, 0, 1), (0, False, 100, 1),
    (4, False, 100, 4), (64, True, 10, 64),
])
def test_steps_per_execution(setting, on_tpu, steps, expected):
    assert choose_steps_per_execution(setting, on_tpu, steps) == expected


def test_negative_steps_per_execution_is_refused():
    with pytest.raises(ValueError, match="steps_per_execution"):
        choose_steps_per_execution(-1, True, 10)
    with pytest.raises(ValueError, match="steps_per_execution"):
        TrainParams(steps_per_execution=-1)
    with pytest.raises(ValueError, match="strategy must be one of auto, tpu"):
        TrainParams(strategy="gpu")


# -- static batches ------------------------------------------------------------------------------
def test_the_global_batch_is_the_per_replica_batch_times_the_replicas():
    batches = static_batches(1000, 32, 8)
    assert (batches.per_replica, batches.global_batch, batches.steps,
            batches.dropped_rows, batches.note) == (32, 256, 3, 232, "")


def test_a_batch_larger_than_the_split_is_lowered_with_a_note():
    batches = static_batches(100, 32, 8, "eval")
    assert (batches.per_replica, batches.global_batch, batches.steps) == (12, 96, 1)
    assert batches.note == ("eval: batch_size lowered from 32 to 12 per replica so that one "
                            "global batch (12 x 8 replicas) fits its 100 rows")


def test_fewer_rows_than_replicas_is_a_clear_error():
    with pytest.raises(ValueError, match="fewer than the 8 TPU replicas"):
        static_batches(5, 32, 8)


@pytest.mark.parametrize("replicas", [1, 4, 8, 32])
def test_static_batches_are_whole_multiples_of_the_replicas(replicas):
    for rows in range(replicas, 600, 7):
        for batch_size in (1, 3, 8, 64, 1000):
            b = static_batches(rows, batch_size, replicas)
            assert b.global_batch % replicas == 0 and 1 <= b.per_replica <= batch_size
            assert b.steps >= 1 and b.steps * b.global_batch + b.dropped_rows == rows
            assert 0 <= b.dropped_rows < b.global_batch


# -- the train step on a host without a TPU ------------------------------------------------------
def test_train_with_strategy_tpu_on_a_host_without_one_fails_before_training(
        prepared_penguins, tmp_path, monkeypatch):
    from gkeflow.components.train.logic import train

    for name in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID"):
        monkeypatch.delenv(name, raising=False)
    if tpu_device_files():
        pytest.skip("this host has TPU device files")
    dataset_dir, prepared = prepared_penguins
    with pytest.raises(TpuUnavailableError, match="strategy 'tpu' was asked"):
        train(dataset_dir, prepared.schema, tmp_path / "model",
              TrainParams(epochs=1, strategy="tpu"))
    assert not (tmp_path / "model").exists()
