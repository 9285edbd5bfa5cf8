"""KFP shell of the training step."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.images import GPU_IMAGE


@dsl.component(base_image=GPU_IMAGE, install_kfp_package=False)
def train_model(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    model: Output[Model],
    metrics: Output[Metrics],
    epochs: int = 20,
    batch_size: int = 32,
    learning_rate: float = 0.01,
    seed: int = 42,
):
    """Trains a Keras classifier on the train split and exports a SavedModel taking raw features.

    Args:
        dataset: Splits written by prepare_data.
        schema: Column types and vocabularies written by prepare_data.
        model: SavedModel whose serving signature takes raw feature values.
        metrics: Final training and validation loss and accuracy.
        epochs: Passes over the training split.
        batch_size: Examples per gradient step.
        learning_rate: Adam learning rate.
        seed: Random seed for weight initialisation and shuffling.
    """
    from pathlib import Path

    from components.prepare.logic import Schema
    from components.train.logic import TrainParams, train

    result = train(
        dataset_dir=Path(dataset.path),
        schema=Schema.load(Path(schema.path)),
        model_dir=Path(model.path),
        params=TrainParams(
            epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, seed=seed
        ),
    )
    for name, value in result.metrics.items():
        metrics.log_metric(name, round(value, 6))
    metrics.log_metric("examples_per_s", round(result.examples_per_s, 1))
    model.metadata.update(
        {"framework": "tensorflow", "epochs_run": result.epochs_run, "features": result.features}
    )
