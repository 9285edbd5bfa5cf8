"""Training: a Keras classifier for tabular data with its preprocessing inside the model.

Numeric features are imputed (missing -> train mean, plus a missing-indicator) and
normalised; categorical features are one-hot encoded with an out-of-vocabulary
bucket. The exported SavedModel takes raw feature values: floats (NaN for missing)
and strings ("" for missing).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from components._atomic import publish_dir
from components.prepare.logic import Schema, load_split

MODEL_METADATA_FILE = "gkeflow_model.json"
SERVING_SIGNATURE = "serve"


@dataclass(frozen=True)
class TrainParams:
    """Hyperparameters of the built-in tabular classifier."""

    epochs: int = 20
    batch_size: int = 32
    learning_rate: float = 0.01
    hidden_units: tuple[int, ...] = (64, 32)
    dropout: float = 0.1
    seed: int = 42

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1; got {self.epochs}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}")
        if not (0.0 < self.learning_rate < 10.0):
            raise ValueError(f"learning_rate must be in (0, 10); got {self.learning_rate}")
        if not (0.0 <= self.dropout < 1.0):
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout}")


@dataclass
class TrainResult:
    metrics: dict[str, float]
    history: dict[str, list[float]]
    epochs_run: int
    examples_per_s: float
    features: list[str] = field(default_factory=list)


def input_names(schema: Schema) -> dict[str, str]:
    """Column name -> the model input's name (letters, digits and '_'; unique)."""
    names: dict[str, str] = {}
    for column in schema.features:
        base = re.sub(r"[^A-Za-z0-9_]+", "_", column.name).strip("_").lower() or "feature"
        if not base[0].isalpha():
            base = f"f_{base}"
        name, n = base, 2
        while name in names.values():
            name, n = f"{base}_{n}", n + 1
        names[column.name] = name
    return names


def column_to_input(values: pd.Series, kind: str) -> np.ndarray:
    """One raw column as the model takes it: float32 with NaN, or text with '' for missing."""
    if kind == "numeric":
        return pd.to_numeric(values, errors="coerce").to_numpy("float32")
    return values.astype(object).where(values.notna(), "").astype(str).to_numpy(object)


def to_model_inputs(frame: pd.DataFrame, schema: Schema) -> dict[str, np.ndarray]:
    """Raw feature arrays keyed by the model's input names."""
    names = input_names(schema)
    inputs: dict[str, np.ndarray] = {}
    for column in schema.features:
        values = frame[column.name] if column.name in frame else pd.Series([None] * len(frame))
        inputs[names[column.name]] = column_to_input(values, column.type)
    return inputs


def encode_labels(frame: pd.DataFrame, schema: Schema) -> np.ndarray:
    index = {label: i for i, label in enumerate(schema.label_vocabulary)}
    labels = frame[schema.label].astype(str)
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise ValueError(
            f"label values {unknown} are not in the schema's label vocabulary "
            f"{schema.label_vocabulary}"
        )
    return labels.map(index).to_numpy("int32")


def build_model(schema: Schema, train_inputs: dict[str, np.ndarray], params: TrainParams):
    """The built-in classifier: preprocessing layers adapted on the train split + an MLP."""
    import keras
    import tensorflow as tf

    @keras.saving.register_keras_serializable(package="gkeflow")
    class ImputeNormalize(keras.layers.Layer):
        """Missing values -> mean, standardise, and append a missing-indicator."""

        def __init__(self, mean: float, std: float, **kwargs):
            super().__init__(**kwargs)
            self.mean = float(mean)
            self.std = float(std) if std > 0 else 1.0

        def call(self, x):
            x = tf.cast(tf.reshape(x, (-1, 1)), tf.float32)
            missing = tf.math.is_nan(x)
            filled = tf.where(missing, tf.constant(self.mean, tf.float32), x)
            return tf.concat([(filled - self.mean) / self.std, tf.cast(missing, tf.float32)], 1)

        def get_config(self):
            return {**super().get_config(), "mean": self.mean, "std": self.std}

    inputs, encoded = {}, []
    for column in schema.features:
        name = input_names(schema)[column.name]
        values = train_inputs[name]
        if column.type == "numeric":
            inp = keras.Input(shape=(), dtype="float32", name=name)
            present = values[~np.isnan(values)]
            mean = float(present.mean()) if present.size else 0.0
            std = float(present.std()) if present.size else 1.0
            encoded.append(ImputeNormalize(mean, std, name=f"{name}_norm")(inp))
        else:
            inp = keras.Input(shape=(), dtype="string", name=name)
            vocabulary = sorted({v for v in values.tolist() if v != ""})
            lookup = keras.layers.StringLookup(
                vocabulary=vocabulary or ["<none>"],
                num_oov_indices=1,
                output_mode="one_hot",
                name=f"{name}_onehot",
            )
            encoded.append(lookup(keras.layers.Reshape((1,))(inp)))
        inputs[name] = inp
    x = keras.layers.Concatenate(name="features")(encoded) if len(encoded) > 1 else encoded[0]
    for i, units in enumerate(params.hidden_units):
        x = keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
        if params.dropout:
            x = keras.layers.Dropout(params.dropout, seed=params.seed)(x)
    outputs = keras.layers.Dense(
        len(schema.label_vocabulary), activation="softmax", name="probabilities"
    )(x)
    model = keras.Model(inputs=inputs, outputs=outputs, name="gkeflow_classifier")
    model.compile(
        optimizer=keras.optimizers.Adam(params.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def make_dataset(inputs: dict[str, np.ndarray], labels: np.ndarray, batch_size: int,
                 shuffle_seed: int | None):
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((inputs, labels))
    if shuffle_seed is not None:
        dataset = dataset.shuffle(len(labels), seed=shuffle_seed, reshuffle_each_iteration=True)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def train(dataset_dir: Path, schema: Schema, model_dir: Path, params: TrainParams) -> TrainResult:
    """Train on the train split, validate on the eval split, export a SavedModel to ``model_dir``."""
    import keras

    keras.utils.set_random_seed(params.seed)
    train_frame = load_split(dataset_dir, "train", schema)
    eval_frame = load_split(dataset_dir, "eval", schema)
    if train_frame.empty:
        raise ValueError(f"the train split in {dataset_dir} has no rows")
    train_inputs = to_model_inputs(train_frame, schema)
    train_labels = encode_labels(train_frame, schema)
    model = build_model(schema, train_inputs, params)

    train_ds = make_dataset(train_inputs, train_labels, params.batch_size, params.seed)
    eval_ds = None
    if not eval_frame.empty:
        eval_ds = make_dataset(
            to_model_inputs(eval_frame, schema), encode_labels(eval_frame, schema),
            params.batch_size, None,
        )
    started = time.perf_counter()
    history = model.fit(
        train_ds, validation_data=eval_ds, epochs=params.epochs, verbose=2, shuffle=False
    )
    elapsed = time.perf_counter() - started

    final = {name: float(values[-1]) for name, values in history.history.items()}
    metrics = {
        "train_loss": final["loss"],
        "train_accuracy": final["accuracy"],
    }
    if "val_loss" in final:
        metrics["eval_loss"] = final["val_loss"]
        metrics["eval_accuracy"] = final["val_accuracy"]

    with publish_dir(model_dir) as scratch:
        model.export(str(scratch), format="tf_saved_model", verbose=False)
        metadata = {
            "framework": "tensorflow",
            "keras_version": keras.__version__,
            "label": schema.label,
            "label_vocabulary": schema.label_vocabulary,
            "features": [
                {"name": c.name, "input": input_names(schema)[c.name], "type": c.type}
                for c in schema.features
            ],
            "signature": SERVING_SIGNATURE,
            "params": asdict(params),
            "metrics": metrics,
        }
        (scratch / MODEL_METADATA_FILE).write_text(json.dumps(metadata, indent=2))

    return TrainResult(
        metrics=metrics,
        history={k: [float(x) for x in v] for k, v in history.history.items()},
        epochs_run=len(history.history["loss"]),
        examples_per_s=len(train_labels) * params.epochs / max(elapsed, 1e-9),
        features=[c.name for c in schema.features],
    )


class ExportedModel:
    """The exported SavedModel, called with raw feature values."""

    def __init__(self, model_dir: Path):
        import tensorflow as tf

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "saved_model.pb").exists():
            raise FileNotFoundError(f"no SavedModel in {self.model_dir}")
        self.metadata = json.loads((self.model_dir / MODEL_METADATA_FILE).read_text())
        self._loaded = tf.saved_model.load(str(self.model_dir))
        self._serve = getattr(self._loaded, SERVING_SIGNATURE)

    @property
    def label_vocabulary(self) -> list[str]:
        return list(self.metadata["label_vocabulary"])

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
            return np.zeros((0, len(self.label_vocabulary)), dtype="float32")
        return np.concatenate(chunks)

    def predict_rows(self, rows: list[dict]) -> list[str]:
        """Class labels for raw rows (dicts); absent or None values count as missing."""
        frame = pd.DataFrame(rows)
        inputs = {}
        for feature in self.metadata["features"]:
            values = frame[feature["name"]] if feature["name"] in frame else pd.Series(
                [None] * len(frame), dtype=object)
            inputs[feature["input"]] = column_to_input(values, feature["type"])
        probs = self.predict_proba(inputs)
        return [self.label_vocabulary[i] for i in probs.argmax(axis=1)]
