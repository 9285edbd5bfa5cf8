"""MultiWorkerMirroredStrategy training: Keras 3's ``fit`` cannot drive it, so a custom loop
with the same loss, optimizer and callbacks."""

from __future__ import annotations


def fit_multi_worker(model, strategy, train_ds, eval_ds, epochs: int, initial_epoch: int,
                     callbacks: list, global_batch: int, regression: bool = False,
                     loss: str = "mse") -> None:
    """``model.fit`` for MultiWorkerMirroredStrategy, as a custom training loop.

    Keras 3's ``fit`` cannot drive MultiWorkerMirroredStrategy (keras-team/keras#20585), so
    each step runs through ``strategy.run`` here, with the same loss, optimizer and
    callbacks (checkpoints, early stopping, throughput) as the single-worker path. A
    regressor (``regression``) learns with ``loss`` (mse or huber) and reports ``rmse``
    where a classifier reports ``accuracy``.
    """
    import keras
    import tensorflow as tf

    if regression:
        loss_fn = (keras.losses.Huber(delta=1.0, reduction="none") if loss == "huber"
                   else keras.losses.MeanSquaredError(reduction="none"))
    else:
        loss_fn = keras.losses.SparseCategoricalCrossentropy(reduction="none")
    optimizer = model.optimizer
    for callback in callbacks:
        callback.set_model(model)

    def replica_metrics(x, y, training: bool):
        outputs = model(x, training=training)
        per_example = loss_fn(y, outputs)
        if regression:  # the squared errors, summed into the epoch's RMSE
            hits = tf.reshape(tf.square(tf.cast(outputs, tf.float32) - tf.cast(y, tf.float32)),
                              [-1])
        else:
            hits = tf.cast(tf.equal(tf.argmax(outputs, 1, output_type=tf.int64),
                                    tf.cast(y, tf.int64)), tf.float32)
        return per_example, hits

    @tf.function
    def train_step(x, y):
        def step(x, y):
            with tf.GradientTape() as tape:
                per_example, hits = replica_metrics(x, y, True)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return tf.reduce_sum(per_example), tf.reduce_sum(hits), tf.cast(tf.size(hits),
                                                                            tf.float32)
        totals = strategy.run(step, args=(x, y))
        return [strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None) for t in totals]

    @tf.function
    def eval_step(x, y):
        def step(x, y):
            per_example, hits = replica_metrics(x, y, False)
            return tf.reduce_sum(per_example), tf.reduce_sum(hits), tf.cast(tf.size(hits),
                                                                            tf.float32)
        totals = strategy.run(step, args=(x, y))
        return [strategy.reduce(tf.distribute.ReduceOp.SUM, t, axis=None) for t in totals]

    def run(dataset, step_fn) -> tuple[float, float]:
        loss = hits = count = 0.0
        for x, y in strategy.experimental_distribute_dataset(dataset):
            batch_loss, batch_hits, batch_count = step_fn(x, y)
            loss, hits, count = loss + float(batch_loss), hits + float(batch_hits), \
                count + float(batch_count)
            if model.stop_training:  # SIGTERM: stop after the current batch
                break
        return loss / max(count, 1.0), hits / max(count, 1.0)

    metric = "rmse" if regression else "accuracy"

    def score(value: float) -> float:
        return value ** 0.5 if regression else value  # mean squared error -> RMSE

    for epoch in range(initial_epoch, epochs):
        for callback in callbacks:
            callback.on_epoch_begin(epoch)
        epoch_loss, value = run(train_ds, train_step)
        logs = {"loss": epoch_loss, metric: score(value)}
        if eval_ds is not None and not model.stop_training:
            logs["val_loss"], value = run(eval_ds, eval_step)
            logs[f"val_{metric}"] = score(value)
        print(f"Epoch {epoch + 1}/{epochs} - " + " - ".join(f"{k}: {v:.4f}"
                                                            for k, v in logs.items()))
        for callback in callbacks:
            callback.on_epoch_end(epoch, logs)
        if model.stop_training:
            break
