"""gkeflow's SavedModel as an MLflow model: ``mlflow.pyfunc.load_model`` (and so `mlflow
models serve` and ``models:/NAME@ALIAS``) loads it and predicts what the SavedModel predicts.

:func:`save_mlflow_model` writes an MLflow model directory whose ``MLmodel`` names this
module as its ``loader_module`` and holds the SavedModel as its data, with a signature built
from the model's own metadata (one column per raw feature: ``double`` for numeric, ``string``
for categorical; out: ``prediction``, the class label or a regressor's value) and an input
example. Loading needs gkeflow and TensorFlow in the environment (as serving the SavedModel
does).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Where the SavedModel goes inside the MLflow model directory.
DATA_PATH = "saved_model"


def _load_pyfunc(data_path: str) -> SavedModelPyfunc:
    """MLflow's entry point for a ``loader_module`` model."""
    return SavedModelPyfunc(Path(data_path))


class SavedModelPyfunc:
    """``predict(frame)``: one prediction per row of raw feature values."""

    def __init__(self, model_dir: Path) -> None:
        from gkeflow.components.train.exported import ExportedModel

        self.model = ExportedModel(model_dir)

    def predict(self, model_input: Any, params: dict | None = None) -> Any:
        import pandas as pd

        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(
            model_input)
        rows = frame.astype(object).where(frame.notna(), None).to_dict("records")
        return pd.DataFrame({"prediction": self.model.predict_rows(rows)})


def signature_of(metadata: dict[str, Any]):
    """The MLflow signature of a model from its gkeflow metadata."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    inputs = Schema([ColSpec("double" if f["type"] == "numeric" else "string", f["name"],
                             required=False) for f in metadata["features"]])
    regression = metadata.get("task", "classification") == "regression"
    outputs = Schema([ColSpec("double" if regression else "string", "prediction")])
    return ModelSignature(inputs=inputs, outputs=outputs)


def example_row(metadata: dict[str, Any]) -> dict[str, Any]:
    """A row of the model's input shape (0.0 for numbers, "" for categories: an unseen
    value the model handles), for a model with no sample at hand."""
    return {f["name"]: 0.0 if f["type"] == "numeric" else "" for f in metadata["features"]}


def save_mlflow_model(model_dir: Path, path: Path, example_rows: list[dict] | None = None
                      ) -> Path:
    """Write the SavedModel at ``model_dir`` as an MLflow model at ``path``."""
    import mlflow.pyfunc

    from gkeflow.components.train.exported import MODEL_METADATA_FILE

    metadata = json.loads((Path(model_dir) / MODEL_METADATA_FILE).read_text())
    staged = Path(path).with_name(Path(path).name + "-data") / DATA_PATH
    import shutil

    shutil.copytree(model_dir, staged)
    import pandas as pd

    names = [f["name"] for f in metadata["features"]]
    example = pd.DataFrame(example_rows or [example_row(metadata)])[names]
    mlflow.pyfunc.save_model(
        str(path), loader_module=__name__, data_path=str(staged),
        signature=signature_of(metadata), input_example=example,
        pip_requirements=_requirements())
    shutil.rmtree(staged.parent, ignore_errors=True)
    return Path(path)


def _requirements() -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("tensorflow", "pandas", "numpy"):
        try:
            found.append(f"{package}=={version(package)}")
        except PackageNotFoundError:
            continue
    return found
