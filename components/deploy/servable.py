"""The servability check: load the exported SavedModel the way TensorFlow Serving does and
answer the evaluation's own test rows through the REST request mapping.

TensorFlow Serving (and so Vertex AI's prebuilt TensorFlow containers and KServe's
``kserve-tensorflow-serving`` runtime) serves the ``serving_default`` signature. Its REST
API's row format is ``{"instances": [{"<input name>": value, ...}, ...]}``: one object per
row keyed by the signature's input names, a JSON number for a float input, a JSON string
for a string input; the answer is ``{"predictions": [...]}`` (one list of class
probabilities per row for a signature with one output). :class:`ServedModel` implements
that mapping over the loaded signature, strictly: an unknown or missing input, or a value
of the wrong JSON type, is refused as TensorFlow Serving refuses it.

:func:`check_servable` refuses a model before anything is deployed when

- it has no ``serving_default`` signature;
- the signature's input names or dtypes differ from the serving contract the training step
  recorded (``gkeflow_model.json``: ``input_signature``), e.g. an input renamed or a float
  input exported as a string;
- its output is not one row of class probabilities per instance;
- its answers for the evaluation's sample rows differ from the evaluation's predictions
  (absolute tolerance ``atol``) or pick another class.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SIGNATURE = "serving_default"
METADATA_FILE = "gkeflow_model.json"
#: How far a served probability may be from the evaluation's (float32 arithmetic).
DEFAULT_ATOL = 1e-4
#: dtype names as the contract writes them -> as tf.DType.name writes them.
DTYPES = {"float32": "float32", "string": "string"}


class NotServable(ValueError):
    """The model would not serve as deployed; the message says why and what to fix."""


class RequestError(ValueError):
    """A request TensorFlow Serving would answer with 400; the message is its error."""


@dataclass(frozen=True)
class ServingContract:
    """What a client sends: input name -> dtype, and the classes the output scores."""

    inputs: dict[str, str]
    labels: list[str]
    features: list[dict] = field(default_factory=list)  # column name, input name, type

    @classmethod
    def of(cls, model_dir: Path) -> ServingContract:
        path = Path(model_dir) / METADATA_FILE
        if not path.exists():
            raise NotServable(f"{path} is missing: the model was not exported by train_model, "
                              "so its serving contract (input names and types) is unknown")
        metadata = json.loads(path.read_text(encoding="utf-8"))
        inputs = dict(metadata.get("input_signature") or {})
        if not inputs:
            raise NotServable(f"{path} records no input_signature; re-export the model")
        return cls(inputs=inputs, labels=list(metadata.get("label_vocabulary") or []),
                   features=list(metadata.get("features") or []))

    def instances(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Raw rows keyed by column -> REST ``instances`` keyed by input name (missing
        numbers as NaN, missing text as "")."""
        out = []
        for row in rows:
            instance = {}
            for feature in self.features:
                value = row.get(feature["name"])
                if self.inputs.get(feature["input"]) == "float32":
                    instance[feature["input"]] = math.nan if value is None else float(value)
                else:
                    instance[feature["input"]] = "" if value is None else str(value)
            out.append(instance)
        return out


class ServedModel:
    """The ``serving_default`` signature of a SavedModel, called as TensorFlow Serving's
    REST API calls it."""

    def __init__(self, model_dir: Path):
        import tensorflow as tf

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "saved_model.pb").exists():
            raise NotServable(f"no SavedModel (saved_model.pb) in {self.model_dir}")
        try:
            loaded = tf.saved_model.load(str(self.model_dir))
        except Exception as exc:  # noqa: BLE001 - any load failure means it cannot serve
            raise NotServable(f"TensorFlow cannot load the SavedModel in {self.model_dir}: "
                              f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                              ) from exc
        self._loaded = loaded  # keeps the signature's variables alive
        if SIGNATURE not in loaded.signatures:
            found = ", ".join(sorted(loaded.signatures)) or "none"
            raise NotServable(f"the SavedModel has no {SIGNATURE!r} signature (it has: {found});"
                              " TensorFlow Serving answers REST requests only through it")
        self.signature = loaded.signatures[SIGNATURE]
        _, specs = self.signature.structured_input_signature
        self.inputs = {name: spec.dtype.name for name, spec in specs.items()}
        self.shapes = {name: spec.shape for name, spec in specs.items()}
        self.outputs = sorted(self.signature.structured_outputs)

    def contract_problems(self, contract: ServingContract) -> list[str]:
        """How the signature differs from ``contract``; empty when it matches."""
        problems = []
        missing = sorted(set(contract.inputs) - set(self.inputs))
        extra = sorted(set(self.inputs) - set(contract.inputs))
        if missing:
            problems.append(f"inputs {missing} of the serving contract are not in the "
                            f"{SIGNATURE} signature")
        if extra:
            problems.append(f"the {SIGNATURE} signature takes inputs {extra} the serving "
                            "contract does not name (a renamed input?)")
        for name in sorted(set(contract.inputs) & set(self.inputs)):
            wanted = DTYPES.get(contract.inputs[name], contract.inputs[name])
            if self.inputs[name] != wanted:
                problems.append(f"input {name!r} is {self.inputs[name]} in the signature but "
                                f"{wanted} in the serving contract")
            if self.shapes[name].rank != 1:
                problems.append(f"input {name!r} has shape {self.shapes[name]}; one value per "
                                "instance ([None]) is what the REST row format sends")
        if len(self.outputs) != 1:
            problems.append(f"the {SIGNATURE} signature has outputs {self.outputs}; one "
                            "output of class probabilities is expected")
        return problems

    def predict(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer a REST ``:predict`` body (row format) as TensorFlow Serving does.

        Raises:
            RequestError: the body TensorFlow Serving would refuse with 400.
        """
        import numpy as np
        import tensorflow as tf

        if not isinstance(body, dict) or "instances" not in body:
            raise RequestError('the request must be a JSON object with "instances"')
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise RequestError('"instances" must be a non-empty list')
        columns: dict[str, list] = {name: [] for name in self.inputs}
        for i, instance in enumerate(instances):
            if not isinstance(instance, dict):
                raise RequestError(f"instance {i} is not an object keyed by input name")
            unknown = sorted(set(instance) - set(self.inputs))
            missing = sorted(set(self.inputs) - set(instance))
            if unknown or missing:
                raise RequestError(
                    f"instance {i}: " + "; ".join(filter(None, [
                        f"unknown inputs {unknown}" if unknown else "",
                        f"missing inputs {missing}" if missing else ""])))
            for name, value in instance.items():
                columns[name].append(_typed(value, self.inputs[name], name, i))
        tensors = {}
        for name, values in columns.items():
            dtype = tf.string if self.inputs[name] == "string" else tf.as_dtype(self.inputs[name])
            tensors[name] = tf.constant(values, dtype=dtype)
        outputs = self.signature(**tensors)
        if len(outputs) == 1:
            [value] = outputs.values()
            return {"predictions": np.asarray(value).tolist()}
        return {"predictions": [
            {k: np.asarray(v)[i].tolist() for k, v in outputs.items()}
            for i in range(len(instances))]}


def _typed(value: Any, dtype: str, name: str, index: int):
    """A JSON value for an input of ``dtype``, refused as TensorFlow Serving refuses it."""
    if dtype == "string":
        if isinstance(value, dict) and set(value) == {"b64"}:
            import base64

            return base64.b64decode(value["b64"])
        if not isinstance(value, str):
            raise RequestError(f"instance {index}: input {name!r} wants a string; got "
                               f"{json.dumps(value)}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"instance {index}: input {name!r} wants a number ({dtype}); got "
                           f"{json.dumps(value)}")
    return value


@dataclass(frozen=True)
class ServabilityReport:
    """What the check found: rows sent, the largest difference, the served classes."""

    rows: int
    max_difference: float
    classes: list[str]
    signature_inputs: dict[str, str]
    versions: str = ""  # saved with / served by / checked with

    @property
    def line(self) -> str:
        versions = f" ({self.versions})" if self.versions else ""
        return (f"servable: {SIGNATURE} answered {self.rows} test rows through the REST "
                f"mapping, largest difference from the evaluation {self.max_difference:.2e}"
                f"{versions}")


def check_versions(model_dir: Path, serving_tf_version: str) -> str:
    """Refuse unless the model was saved with, and this check runs on, the TensorFlow minor
    version the serving runtime has; returns what was compared, for the report.

    Raises:
        NotServable: one line naming the versions that differ and the fix.
    """
    import tensorflow as tf

    from gkeflow.components.serving.runtimes import tf_minor

    path = Path(model_dir) / METADATA_FILE
    saved = ""
    if path.exists():
        saved = str(json.loads(path.read_text(encoding="utf-8")).get("framework_version") or "")
    checked = tf.__version__
    if not serving_tf_version:
        return f"saved with TensorFlow {saved or 'unknown'}, checked with {checked}"
    served = tf_minor(serving_tf_version)
    if saved and tf_minor(saved) != served:
        raise NotServable(f"the model was saved with TensorFlow {saved} but the serving runtime "
                          f"is TensorFlow {serving_tf_version}: serve it with a runtime of "
                          f"TensorFlow 2.{tf_minor(saved)} (`gkeflow images build` builds "
                          "gkeflow-serving), or retrain")
    if tf_minor(checked) != served:
        raise NotServable(f"this check runs TensorFlow {checked} but the serving runtime is "
                          f"TensorFlow {serving_tf_version}, so it would prove nothing about "
                          "that server: run the deploy step in the suite's image")
    return (f"saved with TensorFlow {saved or 'unknown'}, served by TensorFlow "
            f"{serving_tf_version}, checked with {checked}")


def check_servable(model_dir: Path, sample: dict[str, Any] | None,
                   atol: float = DEFAULT_ATOL,
                   serving_tf_version: str = "") -> ServabilityReport:
    """Refuse ``model_dir`` unless it serves the evaluation's ``sample`` rows as evaluated.

    Args:
        model_dir: The exported SavedModel.
        sample: ``sample_predictions`` of evaluation.json: raw rows, probabilities, classes.
        atol: Largest absolute difference allowed per probability.
        serving_tf_version: The serving runtime's TensorFlow (:func:`check_versions`);
            empty: not compared.

    Raises:
        NotServable: naming what does not match and what to do.
    """
    contract = ServingContract.of(model_dir)
    versions = check_versions(model_dir, serving_tf_version)
    served = ServedModel(model_dir)
    problems = served.contract_problems(contract)
    if problems:
        raise NotServable("the model does not match its serving contract: "
                          + "; ".join(problems) + "; re-export it with train_model")
    if not sample or not sample.get("rows"):
        raise NotServable("the evaluation recorded no sample predictions to compare with; "
                          "re-run evaluate_model (evaluation.json sample_predictions)")
    if sample.get("labels") and contract.labels and sample["labels"] != contract.labels:
        raise NotServable(f"the evaluation scored classes {sample['labels']} but the model "
                          f"predicts {contract.labels}: deploy the model that was evaluated")
    body = {"instances": contract.instances(sample["rows"])}
    try:
        answer = served.predict(json.loads(json.dumps(body)))  # what goes over the wire
    except RequestError as exc:
        raise NotServable(f"the served model refuses the evaluation's rows: {exc}") from exc
    predictions = answer["predictions"]
    expected = sample["probabilities"]
    worst = 0.0
    for i, (got, want) in enumerate(zip(predictions, expected, strict=True)):
        if not isinstance(got, list) or len(got) != len(want):
            raise NotServable(f"row {i}: the served model answered {got!r}; expected "
                              f"{len(want)} class probabilities")
        # a regressor's value is in the label's units: the tolerance scales with it
        difference = max(abs(float(g) - float(w)) / (max(1.0, abs(float(w)))
                                                      if not contract.labels else 1.0)
                         for g, w in zip(got, want, strict=True))
        worst = max(worst, difference)
        if not difference <= atol:
            raise NotServable(f"row {i}: served probabilities {got} differ from the "
                              f"evaluation's {want} by {difference:.2e} (> {atol:g})")
    labels = contract.labels or sample.get("labels") or []
    classes = [labels[max(range(len(p)), key=p.__getitem__)] for p in predictions] \
        if labels else []  # a regressor: one value per row, no class
    if sample.get("classes") and classes != sample["classes"]:
        raise NotServable("the served model picks other classes than the evaluation for the "
                          "same rows")
    return ServabilityReport(rows=len(predictions), max_difference=worst, classes=classes,
                             signature_inputs=dict(served.inputs), versions=versions)
