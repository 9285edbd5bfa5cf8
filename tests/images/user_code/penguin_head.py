"""A user's model, copied into the image (images.include) and named as the user_module."""

import keras


def build_model(schema, hparams):
    """A small dense network whose hidden layer is named after this module."""
    inputs = keras.Input(shape=(hparams["input_dim"],))
    hidden = keras.layers.Dense(24, activation="relu", name="penguin_head_hidden")(inputs)
    outputs = keras.layers.Dense(hparams["num_classes"], activation="softmax")(hidden)
    return keras.Model(inputs, outputs, name="penguin_head")
