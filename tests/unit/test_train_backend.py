"""Choosing the Keras backend, refusing a model module that calls TensorFlow on JAX, the
TensorFlow preprocessor the JAX backend trains behind, and how JAX lays its mesh."""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from gkeflow.components.train.backend import (
    BackendError,
    check_user_module_for_jax,
    resolve_backend,
    select_backend,
    tensorflow_calls,
)
from gkeflow.components.train.jax_runtime import JaxPlan, order_devices, processes_to_join
from gkeflow.components.train.logic import TrainParams
from gkeflow.components.train.tpu import TpuHost


@pytest.mark.parametrize(("setting", "on_tpu", "expected"), [
    ("auto", True, "jax"), ("auto", False, "tensorflow"),
    ("tensorflow", True, "tensorflow"), ("jax", False, "jax"),
])
def test_auto_is_jax_on_a_tpu_and_tensorflow_elsewhere(setting, on_tpu, expected):
    assert resolve_backend(setting, on_tpu) == expected


def test_an_unknown_backend_is_refused_in_one_line():
    with pytest.raises(ValueError, match="backend must be one of auto, tensorflow, jax; got"):
        TrainParams(backend="torch")


def test_a_backend_cannot_be_switched_once_keras_is_loaded():
    import keras  # noqa: F401  (the test process trains on TensorFlow)

    assert select_backend("tensorflow") == "tensorflow"
    with pytest.raises(BackendError, match="already loaded on the tensorflow backend"):
        select_backend("jax")


def test_tensorflow_calls_are_found_with_their_lines():
    source = textwrap.dedent("""
        import keras
        import tensorflow as tf
        from tensorflow.keras import layers

        def build_model(schema, hparams):
            x = keras.Input((hparams["input_dim"],))
            y = keras.layers.Dense(4)(x)
            return keras.Model(x, tf.nn.softmax(y))
    """)
    assert tensorflow_calls(source, "m.py") == [
        "m.py:3 import tensorflow", "m.py:4 from tensorflow.keras import layers",
        "m.py:9 tf.nn"]


def test_keras_only_modules_have_no_tensorflow_calls():
    source = "import keras\nfrom keras import ops\n\ndef build_model(s, h):\n    return ops.x\n"
    assert tensorflow_calls(source) == []


def test_a_module_calling_tensorflow_is_refused_for_jax_naming_the_call(tmp_path):
    module = tmp_path / "my_model.py"
    module.write_text("import keras\nimport tensorflow as tf\n\n"
                      "def build_model(schema, hparams):\n    return tf.keras.Model()\n")
    with pytest.raises(BackendError) as caught:
        check_user_module_for_jax(str(module))
    message = str(caught.value)
    assert f"{module}:2 import tensorflow and 1 more" in message
    assert "keras.ops" in message and "backend: tensorflow" in message
    (tmp_path / "clean.py").write_text("import keras\n")
    check_user_module_for_jax(str(tmp_path / "clean.py"))  # nothing to refuse


def test_the_run_refuses_a_tensorflow_module_on_jax_before_any_step(tmp_path):
    from gkeflow.pipelines.settings.parameters import ParameterError, check_parameters

    module = tmp_path / "tf_model.py"
    module.write_text("import tensorflow as tf\n")
    with pytest.raises(ParameterError, match="calls TensorFlow"):
        check_parameters({"backend": "jax", "user_module": str(module)})
    check_parameters({"backend": "tensorflow", "user_module": str(module)})


def test_processes_to_join_come_from_the_tpu_slices_or_keras_variables():
    assert processes_to_join({}, None) == 1
    assert processes_to_join({"KERAS_DISTRIBUTION_NUM_PROCESSES": "3"}, None) == 3
    four_hosts = TpuHost("v6e-16", 0, ("a", "b", "c", "d"), slices=2)
    assert processes_to_join({}, four_hosts) == 8
    assert processes_to_join({}, TpuHost("v6e-8")) == 1
    with pytest.raises(ValueError, match="KERAS_DISTRIBUTION_NUM_PROCESSES is not a number"):
        processes_to_join({"KERAS_DISTRIBUTION_NUM_PROCESSES": "two"}, None)


def test_the_mesh_orders_devices_slice_by_slice_then_host_by_host():
    devices = [SimpleNamespace(id=i, slice_index=s, process_index=p)
               for i, (s, p) in enumerate([(1, 3), (0, 1), (1, 2), (0, 0), (0, 0), (1, 2)])]
    ordered = order_devices(devices)
    assert [(d.slice_index, d.process_index, d.id) for d in ordered] == [
        (0, 0, 3), (0, 0, 4), (0, 1, 1), (1, 2, 2), (1, 2, 5), (1, 3, 0)]
    # CPU and GPU devices have no slice
    assert [d.id for d in order_devices([SimpleNamespace(id=2, process_index=0),
                                         SimpleNamespace(id=1, process_index=0)])] == [1, 2]


def test_plans_describe_where_they_train():
    assert JaxPlan(1).description == "JAX on one cpu device"
    assert JaxPlan(32, processes=8, process_id=3, slices=2, platform="tpu").description == (
        "JAX data parallel over 32 tpu device(s) in 2 slices, 8 processes")
    assert JaxPlan(4, processes=2, process_id=1).chief is False


def test_the_tensorflow_preprocessor_computes_what_the_keras_one_does(prepared_penguins):
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.inputs import input_names, to_model_inputs
    from gkeflow.components.train.models import build_preprocessor, feature_stats_from_prepared
    from gkeflow.components.train.tf_features import build_tf_preprocessor

    data, _ = prepared_penguins
    schema = Schema.load(data)
    names = input_names(schema)
    stats = feature_stats_from_prepared(schema, data)
    frame = load_split(data, "train", schema).head(40).copy()
    # missing numbers, missing and unseen categories
    frame.loc[frame.index[:5], "bill_length_mm"] = np.nan
    frame.loc[frame.index[5:10], "island"] = None
    frame.loc[frame.index[10:15], "island"] = "Atlantis"
    inputs = to_model_inputs(frame, schema)
    keras_one = build_preprocessor(schema, stats, names)
    tf_one = build_tf_preprocessor(schema, stats, names)
    expected = np.asarray(keras_one(inputs))
    got = np.asarray(tf_one(inputs))
    assert tf_one.output_dim == int(keras_one.outputs[0].shape[-1]) == expected.shape[1]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_tensorflow_on_a_tpu_without_its_tpu_build_is_refused_in_one_line():
    from gkeflow.components.train.tpu import TpuUnavailableError, require_tensorflow_tpu

    with pytest.raises(TpuUnavailableError, match="needs TensorFlow's TPU build"):
        require_tensorflow_tpu(lambda name: False)
    require_tensorflow_tpu(lambda name: name == "tensorflow-tpu")


def test_a_local_run_on_jax_without_jax_installed_is_refused_before_any_step(monkeypatch):
    import importlib.util

    from gkeflow.pipelines.settings.parameters import (
        ParameterError,
        check_parameters,
        validate_run_arguments,
    )

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "jax" else real(name, *a))
    with pytest.raises(ParameterError, match=r"pip install 'gkeflow\[jax\]'"):
        validate_run_arguments({"backend": "jax"})
    check_parameters({"backend": "jax"})  # submit: the image, not this machine, trains


def test_a_jax_mesh_with_more_devices_than_rows_says_so_without_tpu_words():
    from gkeflow.components.train.tpu import static_batches

    with pytest.raises(ValueError, match="fewer than the 4 device replicas; add rows or train "
                                         "on fewer devices"):
        static_batches(3, 32, 4, "train", on_tpu=False)
    assert static_batches(10, 32, 4, "eval", on_tpu=False).global_batch == 8


def test_numbers_are_also_encoded_piecewise_linearly_over_their_quantile_bins(
        prepared_penguins):
    from dataclasses import replace

    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.prepare.reader import load_split
    from gkeflow.components.train.inputs import input_names, to_model_inputs
    from gkeflow.components.train.models import feature_stats_from_prepared, quantile_edges
    from gkeflow.components.train.tf_features import build_tf_preprocessor

    data, _ = prepared_penguins
    schema = Schema.load(data)
    names = input_names(schema)
    plain = feature_stats_from_prepared(schema, data)
    numeric = [c.name for c in schema.features if c.type == "numeric"]
    edges = quantile_edges(schema, data, 4)
    train = load_split(data, "train", schema)
    for column in numeric:  # the train split's quantiles, repeated edges merged
        values = train[column].dropna().to_numpy()
        assert edges[column][0] == values.min() and edges[column][-1] == values.max()
        assert list(edges[column]) == sorted(set(edges[column]))
    edges[numeric[0]] = (0.0, 1.0, 2.0, 4.0, 8.0)  # four bins, placed by hand
    edges.pop(numeric[1])  # a column without bins encodes 0 in every bin
    binned = build_tf_preprocessor(schema, replace(plain, edges=edges), names)
    base = build_tf_preprocessor(schema, plain, names)
    assert binned.output_dim == base.output_dim + 4 * len(numeric)
    frame = train.head(5).copy()
    frame[numeric[0]] = [-1.0, 0.5, 1.5, 3.0, 10.0]
    got = np.asarray(binned(to_model_inputs(frame, schema)))
    before = np.asarray(base(to_model_inputs(frame, schema)))

    def offsets(bins):  # where each column's block starts, in the schema's order
        found, at = {}, 0
        for column in schema.features:
            found[column.name] = at
            at += (2 + bins) if column.type == "numeric" else len(
                plain.vocabularies[column.name] or ["<none>"]) + 1
        return found

    old, new = offsets(0), offsets(4)
    first, second = new[numeric[0]], new[numeric[1]]
    # the first column's block: its standardised value and indicator, then its four bins
    np.testing.assert_allclose(got[:, first:first + 2],
                               before[:, old[numeric[0]]:old[numeric[0]] + 2], rtol=1e-6)
    np.testing.assert_allclose(got[:, first + 2:first + 6],
                               [[0, 0, 0, 0], [0.5, 0, 0, 0], [1, 0.5, 0, 0], [1, 1, 0.5, 0],
                                [1, 1, 1, 1]], atol=1e-6)
    np.testing.assert_allclose(got[:, second + 2:second + 6], 0.0)  # the second's bins
    np.testing.assert_allclose(got[:, second:second + 2],
                               before[:, old[numeric[1]]:old[numeric[1]] + 2], rtol=1e-6)


def test_the_keras_recipe_settings_are_checked_on_construction():
    from gkeflow.components.train.params import TrainParams

    assert TrainParams().numeric_bins == 16 and TrainParams().lr_schedule == "cosine"
    assert TrainParams(numeric_bins=0, lr_schedule="constant").numeric_bins == 0
    with pytest.raises(ValueError, match="numeric_bins must be 0"):
        TrainParams(numeric_bins=-1)
    with pytest.raises(ValueError, match="lr_schedule must be one of cosine, constant"):
        TrainParams(lr_schedule="linear")
