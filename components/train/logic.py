"""Training: a Keras classifier for tabular data with its preprocessing inside the model.

Numeric features are imputed (missing -> train mean, plus a missing-indicator) and
normalised; categorical features are one-hot encoded with an out-of-vocabulary
bucket. The exported SavedModel takes raw feature values: floats (NaN for missing)
and strings ("" for missing).

This module holds the training loop and its resume points; what the model takes
(``inputs``), the export (``exported``), models, devices and checkpoints live apart.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gkeflow.components.prepare.logic import Schema
from gkeflow.components.train import regression as reg
from gkeflow.components.train.exported import SERVING_SIGNATURE, export_model
from gkeflow.components.train.inputs import (
    input_names,
    make_split_dataset,
    memory_split_dataset,
    read_whole,
    should_cache,
    split_rows,
)
from gkeflow.components.train.params import TrainParams, TrainResult
from gkeflow.components.train.progress import epoch_progress
from gkeflow.components.train.tpu_utilisation import TpuSampler
from gkeflow.components.train.utilisation import GpuSampler


def throughput_callback(examples_per_epoch: int, log_dir: Path | None = None):
    """A Keras callback recording examples per second of each epoch in ``.rates`` and, with
    a log directory, as TensorBoard scalars."""
    import keras
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(log_dir / "throughput")) if log_dir else None

    class Throughput(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rates: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self._started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            elapsed = time.perf_counter() - self._started
            rate = examples_per_epoch / max(elapsed, 1e-9)
            self.rates.append(rate)
            if writer is not None:
                with writer.as_default():
                    tf.summary.scalar("examples_per_s", rate, step=epoch)
                writer.flush()

    return Throughput()


def train(dataset_dir: Path, schema: Schema, model_dir: Path, params: TrainParams,
          checkpoint_dir: Path | str | None = None, tensorboard_dir: Path | None = None,
          data_uri: str = "", live: Callable[[Any], Any] | None = None) -> TrainResult:
    """Train on the train split, validate on eval, export a SavedModel to ``model_dir``.

    With ``checkpoint_dir`` (a directory or a ``gs://`` URI that is the same on every retry
    of the step, see :func:`~gkeflow.components.train.store.resolve_checkpoint_location`)
    the run resumes from the last checkpoint committed there, commits one on SIGTERM and
    raises :class:`~gkeflow.components.train.checkpoint.Preempted`, and removes its
    checkpoints after success. ``live(gpu_sampler)`` gives a Keras callback (or a list of
    them, or None) that sees every epoch end after the sampler has closed it: the step's
    live curves.
    """
    if params.model_type == "auto":
        from gkeflow.components.train.candidates import train_candidates

        return train_candidates(dataset_dir, schema, model_dir, params, checkpoint_dir,
                                tensorboard_dir, data_uri, live, train_one=train)
    if params.model_type in ("gbdt", "linear") and not params.user_module:
        from gkeflow.components.train.gbdt import train_gbdt
        from gkeflow.components.train.linear import train_linear

        family = train_gbdt if params.model_type == "gbdt" else train_linear
        return family(dataset_dir, schema, model_dir, params, checkpoint_dir,
                      tensorboard_dir, data_uri, live)
    from gkeflow.components.train import tpu as tpus
    from gkeflow.components.train.backend import resolve_backend, select_backend

    tpu_host = tpus.find_tpu(os.environ, tpus.tpu_device_files())
    on_tpu = tpus.wants_tpu(params.strategy, tpu_host)
    backend = resolve_backend(params.backend, on_tpu)
    select_backend(backend)  # before Keras is imported: it reads its backend once

    import keras
    import tensorflow as tf

    from gkeflow.components.train import devices as dev
    from gkeflow.components.train.checkpoint import make_checkpoint, read_checkpoint
    from gkeflow.components.train.models import (
        build_builtin,
        build_user_model,
    )
    from gkeflow.components.train.resume import ReadOnlyStore, WorkerStore, agree_on_checkpoint
    from gkeflow.components.train.store import LocalStore, Scratch, fetched, open_store

    tf_config = os.environ.get("TF_CONFIG", "")
    jax_plan = None
    if backend == "jax":
        from gkeflow.components.train import jax_runtime

        if params.user_module:
            from gkeflow.components.train.backend import check_user_module_for_jax

            check_user_module_for_jax(params.user_module)
        if dev.workers_in_tf_config(tf_config) > 1:
            raise ValueError("TF_CONFIG describes a TensorFlow multi-worker cluster, which the "
                             "JAX backend does not read; set backend: tensorflow")
        if on_tpu:
            jax_runtime.require_libtpu()
        jax_runtime.join_hosts(os.environ, tpu_host if on_tpu else None)
        jax_plan, found = jax_runtime.distribute(tpu_host if on_tpu else None)
    resolver = tpus.plan_resolver(tpu_host) if on_tpu and jax_plan is None else None
    if resolver is not None:
        tpus.require_tensorflow_tpu()
    if resolver is not None and resolver.role == "server":
        # Hosts other than worker 0 of a multi-host slice lend their chips to worker 0.
        print(f"{tpus.tpu_summary(tpu_host)}: serving this host's chips to worker 0", flush=True)
        tpus.serve_tpu_host(resolver, tf)
        return TrainResult(metrics={}, history={}, epochs_run=0, examples_per_s=0.0,
                           strategy=resolver.description)
    if jax_plan is not None:
        plan, strategy = dev.StrategyPlan("jax"), None
    elif on_tpu:
        # The TPU system is initialised before anything else touches TensorFlow's runtime.
        plan = dev.plan_strategy(dev.Devices(), tf_config, resolver)
        strategy = dev.make_strategy(plan)
        found = dev.detect()
        print(tpus.tpu_summary(tpu_host))
    elif dev.workers_in_tf_config(tf_config) > 1:
        # Collective ops must be configured before anything else touches TensorFlow's runtime.
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        found = dev.detect()
        plan = dev.plan_strategy(found, tf_config)
    else:
        found = dev.detect()
        plan = dev.plan_strategy(found, tf_config)
        strategy = dev.make_strategy(plan)
    dev.require_gpu(found, params.require_gpu)
    replicas = jax_plan.devices if jax_plan else strategy.num_replicas_in_sync
    described = jax_plan.description if jax_plan else plan.description
    precision = dev.choose_precision(params.precision, found, on_tpu)
    # Keras on JAX compiles every step with XLA unless told not to (eager JAX is slow).
    jit = (params.jit_compile != "off" if jax_plan
           else dev.choose_jit(params.jit_compile, found, on_tpu))
    print(f"backend: {backend}; devices: {found.gpus or found.cpus}; {described}; "
          f"replicas={replicas}; precision={precision}; jit_compile={jit}")

    keras.utils.set_random_seed(params.seed)
    rows = split_rows(dataset_dir)
    if not rows.get("train"):
        raise ValueError(f"the train split in {dataset_dir} has no rows")
    names = input_names(schema)
    from gkeflow.components.train.models import training_stats
    from gkeflow.components.train.tf_features import build_tf_preprocessor

    stats = training_stats(schema, dataset_dir, params.numeric_bins)
    # the input pipeline and the export stay in TensorFlow on every backend; the numeric
    # columns are one tensor there, however many they are
    preprocessor = build_tf_preprocessor(schema, stats, names)
    input_dim = preprocessor.output_dim
    # regression: one linear output learning the standardised label (train/regression.py)
    num_classes = 1 if schema.regression else len(schema.label_vocabulary)
    scaling = (reg.label_scaling(dataset_dir, schema, params.label_transform)
               if schema.regression else None)
    if scaling is not None:
        print(f"task: regression of {schema.label!r}; label scaled by {scaling}; loss "
              f"{'huber' if params.loss == 'huber' else 'mse'}")

    global_batch = eval_batch = params.batch_size * replicas
    train_steps = math.ceil(rows["train"] / global_batch)
    eval_steps = math.ceil(rows.get("eval", 0) / global_batch)
    # One compiled shape on a TPU, and on JAX's device mesh whole batches of a multiple of
    # the replicas (each device takes an equal share), lowered to fit.
    static = on_tpu or (jax_plan is not None and replicas > 1)
    if static:
        batches = tpus.static_batches(rows["train"], params.batch_size, replicas, "train",
                                      on_tpu)
        global_batch, train_steps = batches.global_batch, batches.steps
        evals = tpus.static_batches(rows.get("eval", 0), params.batch_size, replicas,
                                    "eval", on_tpu) if rows.get("eval", 0) >= replicas else None
        eval_batch, eval_steps = (evals.global_batch, evals.steps) if evals else (0, 0)
        for note in (batches.note, evals.note if evals else ""):
            if note:
                print(f"note: {note}")
    elif replicas > 1:
        train_steps = rows["train"] // global_batch
    learning_rate = params.learning_rate * (replicas if params.scale_learning_rate else 1)
    cache = should_cache(params.cache_dataset, rows["train"] + rows.get("eval", 0), input_dim)
    binned = sum(1 for edges in stats.edges.values() if len(edges) > 1)
    print(f"features: {input_dim} inputs"
          + (f"; {binned} numeric columns also in up to {params.numeric_bins} "
             "piecewise-linear quantile bins" if binned else "")
          + f"; learning rate {params.lr_schedule}"
          + (f" from {learning_rate:g}" if params.lr_schedule == "cosine" else
             f" {learning_rate:g}"))
    # a wide table's small splits on one machine: read whole, preprocessed once, batched
    memory = (cache and plan.kind in ("default", "mirrored", "jax")
              and read_whole(rows["train"] + rows.get("eval", 0), input_dim,
                             len(schema.features)))
    print(f"input pipeline: {rows['train']} train rows "
          + ("read into memory and preprocessed once" if memory else
             f"streamed from TFRecord shards; preprocessed batches cached in memory: {cache}"))
    if replicas > 1 and rows["train"] < global_batch:
        raise ValueError(
            f"the train split has {rows['train']} rows, fewer than one global batch "
            f"({params.batch_size} per replica x {replicas} replicas); lower batch_size"
        )
    # Several replicas split each batch between them, and TPUs compile one batch shape:
    # keep every batch whole there.
    whole = replicas > 1 or static

    def split_dataset(split: str, batch: int, **options):
        if memory:
            return memory_split_dataset(dataset_dir, split, schema, batch, preprocessor,
                                        seed=params.seed, label_scaling=scaling, **options)
        return make_split_dataset(dataset_dir, split, schema, batch, preprocessor,
                                  seed=params.seed, cache=cache, workers=plan.workers,
                                  label_scaling=scaling, **options)

    train_ds = split_dataset("train", global_batch, shuffle=True, drop_remainder=whole)
    eval_ds = split_dataset("eval", eval_batch, drop_remainder=static) if eval_steps else None
    steps_per_execution = tpus.choose_steps_per_execution(params.steps_per_execution, on_tpu,
                                                          train_steps)
    if on_tpu:
        print(f"TPU batches: {global_batch} global ({global_batch // replicas} per replica), "
              f"{train_steps} train and {eval_steps} eval steps per epoch; "
              f"steps_per_execution={steps_per_execution}")

    # Only the chief writes the shared store; the other workers resume from the checkpoint
    # the chief read and broadcast, through a read-only view (see train/resume.py).
    chief = jax_plan.chief if jax_plan else dev.is_chief(tf_config)
    store = open_store(checkpoint_dir) if checkpoint_dir else None
    if store is not None and not chief:
        store = ReadOnlyStore(store)
    if plan.kind == "multi_worker_mirrored":
        resume = agree_on_checkpoint(strategy, chief, store)
    else:
        resume = read_checkpoint(store) if store is not None else None
    if jax_plan is not None:
        jax_runtime.agree_on_epoch(jax_plan, resume[0].epochs_completed if resume else 0)
    state, token = resume if resume else (None, None)
    keras.mixed_precision.set_dtype_policy(precision)
    try:
        with strategy.scope() if strategy is not None else contextlib.nullcontext():
            if state is not None:
                with fetched(store, state.model_file) as local:
                    classifier = keras.models.load_model(local)
                print(f"resuming from checkpoint: {state.epochs_completed} epochs completed "
                      f"({store.uri})")
            else:
                hparams = {**asdict(params), "input_dim": input_dim, "num_classes": num_classes,
                           "task": schema.task}
                classifier = (
                    build_user_model(params.user_module, schema, hparams) if params.user_module
                    else build_builtin(params.model_type, input_dim, num_classes,
                                       params.hidden_units, params.dropout, params.seed,
                                       regression=schema.regression)
                )
                rate = learning_rate
                if params.lr_schedule == "cosine":  # to 0 over every step of every epoch
                    rate = keras.optimizers.schedules.CosineDecay(
                        learning_rate, params.epochs * max(1, train_steps))
                classifier.compile(
                    optimizer=keras.optimizers.Adam(rate),
                    loss=(reg.loss_function(params.loss) if schema.regression
                          else "sparse_categorical_crossentropy"),
                    metrics=([keras.metrics.RootMeanSquaredError(name="rmse")]
                             if schema.regression else ["accuracy"]),
                    jit_compile=jit,
                    steps_per_execution=steps_per_execution,
                )
    finally:
        keras.mixed_precision.set_dtype_policy("float32")

    # Every worker of a multi-worker run saves (saving is a collective operation), but only
    # the chief writes where others look: the rest write to private scratch directories
    # (removed at the end, or with the scratch object when training raises).
    scratch = Scratch("gkeflow-train-")
    private = scratch.directory()
    checkpoint = make_checkpoint(
        store if (store is not None and chief)
        else WorkerStore(LocalStore(private / "checkpoint"), store),
        state, token,
        every_epochs=params.checkpoint_every_epochs if checkpoint_dir else 0,
        every_steps=params.checkpoint_every_steps if checkpoint_dir else 0,
        patience=params.early_stopping_patience if eval_ds is not None else 0,
        monitor="val_loss" if eval_ds is not None else "loss",
    )
    # A resumed run with no epoch left to train never calls fit, which is what hands Keras
    # callbacks their model: hand it over here so the best weights can still be restored.
    checkpoint.set_model(classifier)
    throughput = throughput_callback(rows["train"], tensorboard_dir)
    callbacks_progress = epoch_progress(params.epochs) if chief else None
    # the chips' duty cycle from libtpu on a TPU host, NVML's figures elsewhere
    gpu_sampler = (TpuSampler if on_tpu else GpuSampler)(params.gpu_sample_interval_s)
    callbacks = [checkpoint, throughput, gpu_sampler.callback(tensorboard_dir)]
    if callbacks_progress is not None:
        callbacks.append(callbacks_progress)
    if tensorboard_dir is not None:
        callbacks.append(keras.callbacks.TensorBoard(log_dir=str(tensorboard_dir)))
    live_callbacks = live(gpu_sampler) if live is not None else None  # one, a list or None
    for callback in (live_callbacks if isinstance(live_callbacks, list) else [live_callbacks]):
        if callback is not None:
            callbacks.append(callback)
    initial_epoch = state.epochs_completed if state else 0
    previous_handler = checkpoint.install_sigterm_handler() if checkpoint_dir else None
    started = time.perf_counter()
    gpu_sampler.start()
    try:
        if initial_epoch < params.epochs and not (state and state.stopped_early):
            if plan.kind == "multi_worker_mirrored":
                from gkeflow.components.train.multi_worker import fit_multi_worker

                fit_multi_worker(classifier, strategy, train_ds, eval_ds, params.epochs,
                                 initial_epoch, callbacks, global_batch,
                                 regression=schema.regression, loss=params.loss)
            elif cache:
                # Keras stops an epoch after the known number of steps, before the end of the
                # data, which would leave a cache unfinished (and refilled every epoch):
                # repeat the cached data and say how many steps make an epoch.
                classifier.fit(
                    train_ds.repeat(), validation_data=eval_ds and eval_ds.repeat(),
                    epochs=params.epochs, initial_epoch=initial_epoch, callbacks=callbacks,
                    steps_per_epoch=train_steps, validation_steps=eval_steps or None,
                    verbose=2, shuffle=False)
            else:
                # The number of batches is known from prepare's counts: telling tf.data lets
                # Keras size each epoch instead of discovering its end.
                import tensorflow as tf

                known = tf.data.experimental.assert_cardinality
                train_known = train_ds.apply(known(train_steps))
                eval_known = eval_ds and eval_ds.apply(known(eval_steps))
                classifier.fit(train_known, validation_data=eval_known, epochs=params.epochs,
                               initial_epoch=initial_epoch, callbacks=callbacks, verbose=2,
                               shuffle=False)
    finally:
        gpu_sampler.stop()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
    elapsed = time.perf_counter() - started
    checkpoint.stop_if_preempted()
    history = checkpoint.state.history
    restored = checkpoint.restore_best()
    best_epoch = checkpoint.state.best_epoch or len(history.get("loss", []))

    final = {name: values[best_epoch - 1] for name, values in history.items()
             if len(values) >= best_epoch}
    if scaling is not None:
        metrics = reg.history_metrics(final, scaling)
    else:
        metrics = {"train_loss": final.get("loss", float("nan")),
                   "train_accuracy": final.get("accuracy", float("nan"))}
        if "val_loss" in final:
            metrics["eval_loss"] = final["val_loss"]
            metrics["eval_accuracy"] = final["val_accuracy"]
    metrics.update(dev.gpu_memory_metrics())
    usage = gpu_sampler.report(params.gpu_utilisation_warn_below)
    print(usage.summary_line(), flush=True)
    if usage.warning:
        print(f"WARNING: {usage.warning}", flush=True)
    metrics.update(usage.metrics())

    metadata = {
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        "keras_version": keras.__version__,
        "label": schema.label,
        "task": schema.task,
        "label_vocabulary": schema.label_vocabulary,
        "label_scaling": scaling.as_dict() if scaling is not None else None,
        "features": [
            {"name": c.name, "input": names[c.name], "type": c.type} for c in schema.features
        ],
        "signature": SERVING_SIGNATURE,
        "input_signature": {
            names[c.name]: ("float32" if c.type == "numeric" else "string")
            for c in schema.features
        },
        "model": params.user_module or params.model_type,
        "params": asdict(params),
        "training_data_uri": data_uri or str(dataset_dir),
        "best_epoch": best_epoch,
        "restored_best_weights": restored,
        "epochs_run": len(history.get("loss", [])),
        "strategy": described,
        "training_backend": backend,
        "replicas": replicas,
        "precision": precision,
        "metrics": metrics,
        "gpu_utilisation": usage.to_dict(),
    }
    export_model(model_dir if chief else private / "model", preprocessor, classifier, schema,
                 metadata, scaling)
    if store is not None and chief:
        checkpoint.remove()
    scratch.remove()

    rates = throughput.rates
    return TrainResult(
        metrics=metrics,
        history=history,
        epochs_run=len(history.get("loss", [])),
        examples_per_s=(sum(rates) / len(rates)) if rates else
        rows["train"] * max(1, params.epochs - initial_epoch) / max(elapsed, 1e-9),
        features=[c.name for c in schema.features],
        best_epoch=best_epoch,
        resumed_from_epoch=initial_epoch,
        epoch_examples_per_s=rates,
        strategy=described,
        precision=precision,
        backend=backend,
        gpu_utilisation=usage,
        gpu_utilisation_warning=usage.warning,
    )
