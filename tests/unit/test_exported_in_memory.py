"""A candidate predicts its eval split with the serving function it just exported (reading a
wide SavedModel back costs seconds): the same predictions as the SavedModel read from disk."""

from __future__ import annotations

import numpy as np

from gkeflow.components.prepare.reader import load_split
from gkeflow.components.train.exported import ExportedModel
from gkeflow.components.train.inputs import to_model_inputs
from gkeflow.components.train.logic import TrainParams, train


def test_the_function_just_exported_serves_as_the_savedmodel_does(prepared_penguins,
                                                                   tmp_path):
    dataset_dir, prepared = prepared_penguins
    first, second = tmp_path / "first", tmp_path / "second"
    train(dataset_dir, prepared.schema, first, TrainParams(epochs=2, model_type="mlp"))
    inputs = to_model_inputs(load_split(dataset_dir, "eval", prepared.schema), prepared.schema)

    in_memory = ExportedModel(first, written_here=True)
    from_disk = ExportedModel(first)
    assert not hasattr(in_memory, "_loaded") and hasattr(from_disk, "_loaded")
    served, loaded = in_memory.predict_proba(inputs), from_disk.predict_proba(inputs)
    assert served.shape == loaded.shape == (len(next(iter(inputs.values()))), 3)
    np.testing.assert_allclose(served, loaded, rtol=1e-5, atol=1e-6)

    # only the last export is kept: the first model is read from disk again
    train(dataset_dir, prepared.schema, second, TrainParams(epochs=1, model_type="mlp"))
    assert hasattr(ExportedModel(first, written_here=True), "_loaded")
    assert not hasattr(ExportedModel(second, written_here=True), "_loaded")
