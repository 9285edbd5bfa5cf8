"""The exported SavedModel: written with its preprocessing inside and one serving signature
that takes raw feature values, and read back to predict (evaluation, batch scoring)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from gkeflow.components._atomic import publish_dir
from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train.inputs import column_to_input, input_names

MODEL_METADATA_FILE = "gkeflow_model.json"
SERVING_SIGNATURE = "serve"

#: The SavedModel this process wrote last: its folder and its serving function in memory
#: (the same traced graph). Reading a SavedModel back costs seconds when its signature has
#: thousands of inputs; a candidate that predicts its eval split right after exporting
#: uses this instead. One model only: a process that trains many keeps none alive.
_WRITTEN: dict[Path, object] = {}


def raw_signature(features: list[dict]) -> dict:
    """The serving signature's inputs, one per feature (``{"input", "type"}`` as
    ``gkeflow_model.json`` lists them): float32 for numbers (NaN missing), strings for
    categories ("" missing), each a batch ``[None]``."""
    import tensorflow as tf

    return {f["input"]: tf.TensorSpec([None], tf.float32 if f["type"] == "numeric"
                                      else tf.string, name=f["input"]) for f in features}


def schema_features(schema: Schema) -> list[dict]:
    """The schema's features as ``gkeflow_model.json`` lists them."""
    names = input_names(schema)
    return [{"name": c.name, "input": names[c.name], "type": c.type} for c in schema.features]


def export_model(model_dir: Path, preprocessor, classifier, schema: Schema,
                 metadata: dict, scaling=None) -> None:
    """Write the SavedModel (preprocessing and classifier behind one signature) and its
    metadata into ``model_dir``, which appears whole or not at all. A regressor's signature
    returns ``(rows, 1)`` values in the label's units (``scaling`` inverted inside). A model
    trained on JAX is converted to TensorFlow (its preprocessor is one already)."""
    import keras
    import tensorflow as tf

    signature = raw_signature(schema_features(schema))

    archive = keras.export.ExportArchive()
    archive.track(preprocessor)
    archive.track(classifier)
    on_jax = keras.backend.backend() == "jax"
    if on_jax:  # the classifier converted to TensorFlow (jax2tf), as its own endpoint
        from gkeflow.components.train.jax_runtime import classify_endpoint

        classify = classify_endpoint(archive, classifier)
    else:
        def classify(x):
            return classifier(x, training=False)

    @tf.function(input_signature=[signature])
    def serve(features):
        outputs = tf.cast(classify(preprocessor(features)), tf.float32)
        if scaling is None:
            return outputs
        from gkeflow.components.train.regression import unscale_prediction

        return unscale_prediction(outputs, scaling)

    archive.add_endpoint(SERVING_SIGNATURE, serve)
    if on_jax:  # the first endpoint is TF Serving's default: there, classify
        archive.add_endpoint("serving_default", serve)
    _WRITTEN.clear()
    with publish_dir(model_dir) as scratch:
        archive.write_out(str(scratch), verbose=False)
        (scratch / MODEL_METADATA_FILE).write_text(json.dumps(metadata, indent=2))
    if not on_jax:  # a JAX classifier's endpoint lives in the archive only
        _WRITTEN[Path(model_dir).resolve()] = serve


class ExportedModel:
    """The exported SavedModel, called with raw feature values."""

    def __init__(self, model_dir: Path, written_here: bool = False):
        """``written_here``: the function this process exported into ``model_dir`` last,
        when there is one, instead of reading the SavedModel back."""
        import tensorflow as tf

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "saved_model.pb").exists():
            raise FileNotFoundError(f"no SavedModel in {self.model_dir}")
        self.metadata = json.loads((self.model_dir / MODEL_METADATA_FILE).read_text())
        written = _WRITTEN.get(self.model_dir.resolve()) if written_here else None
        if written is not None:
            self._serve = written
        else:
            self._loaded = tf.saved_model.load(str(self.model_dir))
            self._serve = getattr(self._loaded, SERVING_SIGNATURE)

    @property
    def label_vocabulary(self) -> list[str]:
        return list(self.metadata["label_vocabulary"])

    @property
    def regression(self) -> bool:
        return self.metadata.get("task", "classification") == "regression"

    def predict_values(self, inputs: dict[str, np.ndarray], batch_size: int = 4096
                       ) -> np.ndarray:
        """A regressor's predictions, one float per row, in the label's units."""
        return self.predict_proba(inputs, batch_size).reshape(-1)

    def predict_proba(self, inputs: dict[str, np.ndarray], batch_size: int = 4096) -> np.ndarray:
        import tensorflow as tf

        kinds = {f["input"]: f["type"] for f in self.metadata["features"]}
        missing = sorted(set(kinds) - set(inputs))
        if missing:
            raise ValueError(f"missing model inputs: {', '.join(missing)}")
        total = len(next(iter(inputs.values()))) if inputs else 0
        chunks = []
        for start in range(0, total, batch_size):
            batch = {}
            for name in kinds:
                values = inputs[name][start:start + batch_size]
                dtype = tf.float32 if kinds[name] == "numeric" else tf.string
                batch[name] = tf.constant(values, dtype=dtype)
            chunks.append(self._serve(batch).numpy())
        if not chunks:
            width = 1 if self.regression else len(self.label_vocabulary)
            return np.zeros((0, width), dtype="float32")
        return np.concatenate(chunks)

    def predict_rows(self, rows: list[dict]) -> list:
        """Class labels (a regressor: values) for raw rows (dicts); absent or None values
        count as missing."""
        frame = pd.DataFrame(rows)
        inputs = {}
        for feature in self.metadata["features"]:
            values = frame[feature["name"]] if feature["name"] in frame else pd.Series(
                [None] * len(frame), dtype=object)
            inputs[feature["input"]] = column_to_input(values, feature["type"])
        probs = self.predict_proba(inputs)
        if self.regression:
            return [float(v) for v in probs.reshape(-1)]
        return [self.label_vocabulary[i] for i in probs.argmax(axis=1)]
