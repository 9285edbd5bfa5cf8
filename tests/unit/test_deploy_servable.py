"""The servability check against a model that serves and models that do not."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from gkeflow.components.deploy.servable import (
    METADATA_FILE,
    NotServable,
    RequestError,
    ServedModel,
    ServingContract,
    check_servable,
)


@pytest.fixture(scope="module")
def sample(prepared_penguins, trained_penguins):
    from gkeflow.components.evaluate.logic import evaluate

    dataset_dir, prepared = prepared_penguins
    model_dir, _ = trained_penguins
    result = evaluate(dataset_dir, prepared.schema, model_dir, min_accuracy=0.0)
    return json.loads(result.to_json())["sample_predictions"]


def _reexport(model_dir, out, rename=None, dtype=None):
    """The trained model behind a serving_default signature whose inputs are changed:
    ``rename`` = (old, new) input name, ``dtype`` = (input, tf dtype)."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(model_dir))
    serve = loaded.signatures["serving_default"]
    _, specs = serve.structured_input_signature
    spec = {}
    for name, s in specs.items():
        new_name = rename[1] if rename and name == rename[0] else name
        new_dtype = dtype[1] if dtype and name == dtype[0] else s.dtype
        spec[new_name] = tf.TensorSpec(s.shape, new_dtype, name=new_name)

    class Wrapper(tf.Module):
        def __init__(self):
            super().__init__()
            self.inner = loaded

        @tf.function(input_signature=[spec])
        def call(self, features):
            args = {}
            for name, s in specs.items():
                source = rename[1] if rename and name == rename[0] else name
                value = features[source]
                if value.dtype != s.dtype:
                    value = (tf.strings.to_number(value, tf.float32) if value.dtype == tf.string
                             else tf.cast(value, s.dtype))
                args[name] = value
            return serve(**args)

    module = Wrapper()
    tf.saved_model.save(module, str(out),
                        signatures={"serving_default": module.call.get_concrete_function()})
    shutil.copy(model_dir / METADATA_FILE, out / METADATA_FILE)
    return out


def test_trained_model_serves_the_evaluations_rows(trained_penguins, sample):
    model_dir, _ = trained_penguins
    report = check_servable(model_dir, sample)
    assert report.rows == len(sample["rows"]) > 0
    assert report.classes == sample["classes"]
    assert report.max_difference <= 1e-4


def test_rest_mapping_answers_like_tensorflow_serving(trained_penguins, sample):
    model_dir, _ = trained_penguins
    served = ServedModel(model_dir)
    contract = ServingContract.of(model_dir)
    body = {"instances": contract.instances(sample["rows"][:3])}
    answer = served.predict(json.loads(json.dumps(body)))
    assert len(answer["predictions"]) == 3
    assert all(len(p) == len(contract.labels) for p in answer["predictions"])
    assert all(abs(sum(p) - 1.0) < 1e-3 for p in answer["predictions"])


def test_rest_mapping_refuses_what_tensorflow_serving_refuses(trained_penguins, sample):
    model_dir, _ = trained_penguins
    served = ServedModel(model_dir)
    contract = ServingContract.of(model_dir)
    [instance] = contract.instances(sample["rows"][:1])
    numeric = next(k for k, v in contract.inputs.items() if v == "float32")
    text = next(k for k, v in contract.inputs.items() if v == "string")
    with pytest.raises(RequestError, match="wants a number"):
        served.predict({"instances": [{**instance, numeric: "39.1"}]})
    with pytest.raises(RequestError, match="wants a string"):
        served.predict({"instances": [{**instance, text: 3}]})
    with pytest.raises(RequestError, match="unknown inputs"):
        served.predict({"instances": [{**instance, "nope": 1.0}]})
    with pytest.raises(RequestError, match="missing inputs"):
        served.predict({"instances": [{k: v for k, v in instance.items() if k != numeric}]})
    with pytest.raises(RequestError, match="instances"):
        served.predict({"inputs": instance})


def test_missing_numbers_travel_as_nan(trained_penguins):
    model_dir, _ = trained_penguins
    contract = ServingContract.of(model_dir)
    row = {f["name"]: None for f in contract.features}
    [instance] = contract.instances([row])
    numeric = [k for k, v in contract.inputs.items() if v == "float32"]
    assert numeric and all(math.isnan(instance[k]) for k in numeric)
    answer = ServedModel(model_dir).predict({"instances": [instance]})
    assert len(answer["predictions"][0]) == len(contract.labels)


def test_renamed_input_is_refused_with_the_reason(trained_penguins, sample, tmp_path):
    model_dir, _ = trained_penguins
    name = sorted(ServingContract.of(model_dir).inputs)[0]
    broken = _reexport(model_dir, tmp_path / "renamed", rename=(name, f"{name}_renamed"))
    with pytest.raises(NotServable) as caught:
        check_servable(broken, sample)
    message = str(caught.value)
    assert f"{name}_renamed" in message and "renamed input" in message
    assert f"['{name}']" in message


def test_wrong_dtype_is_refused_with_the_reason(trained_penguins, sample, tmp_path):
    import tensorflow as tf

    model_dir, _ = trained_penguins
    contract = ServingContract.of(model_dir)
    numeric = next(k for k, v in contract.inputs.items() if v == "float32")
    broken = _reexport(model_dir, tmp_path / "dtype", dtype=(numeric, tf.string))
    with pytest.raises(NotServable, match=f"input '{numeric}' is string in the signature but "
                                          "float32 in the serving contract"):
        check_servable(broken, sample)


def test_predictions_that_differ_from_the_evaluation_are_refused(trained_penguins, sample):
    model_dir, _ = trained_penguins
    changed = json.loads(json.dumps(sample))
    changed["probabilities"][0] = [p + 0.01 for p in changed["probabilities"][0]]
    with pytest.raises(NotServable, match="row 0: served probabilities"):
        check_servable(model_dir, changed)


def test_no_signature_and_no_sample_are_refused(trained_penguins, tmp_path):
    import tensorflow as tf

    model_dir, _ = trained_penguins
    with pytest.raises(NotServable, match="no sample predictions"):
        check_servable(model_dir, None)
    bare = tmp_path / "bare"
    module = tf.Module()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, str(bare))
    shutil.copy(model_dir / METADATA_FILE, bare / METADATA_FILE)
    with pytest.raises(NotServable, match="no 'serving_default' signature"):
        check_servable(bare, {"rows": [{}], "probabilities": [[1.0]]})
