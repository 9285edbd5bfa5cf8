"""train-model's curves as a Vertex AI experiment run's time series, epoch by epoch.

Vertex AI keeps an experiment run's time series in the TensorBoard instance that backs the
experiment (``tracking.<env>.vertex_experiments.tensorboard``): each curve is a SCALAR
``TensorboardTimeSeries`` of the ``TensorboardRun`` named after the experiment run, in the
``TensorboardExperiment`` named after the experiment (the ids the aiplatform SDK gives them).
The experiment run is linked to its TensorBoard run by a ``google.VertexTensorboardRun``
artifact (:func:`gkeflow.components.tracking.vertex_run.link_tensorboard_run`, called where
the experiment run is written), which is how the console and
``ExperimentRun.get_time_series_data_frame`` find the curves.

The step's environment names the TensorBoard instance (``GKEFLOW_VERTEX_TENSORBOARD``), the
experiment and the run: a compiled GKE step through the experiment's variables and its
pipeline run id (:mod:`vertex_run`), a local run through ``GKEFLOW_VERTEX_CURVES_*`` set by
``gkeflow run``. Best effort like every tracking call: the first failure is one line and
turns the curves off for the rest of the step; training never waits long on Vertex AI.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gkeflow.components.tracking import vertex_run
from gkeflow.components.tracking.client import one_line

ENV_CURVES_EXPERIMENT = "GKEFLOW_VERTEX_CURVES_EXPERIMENT"
ENV_CURVES_RUN = "GKEFLOW_VERTEX_CURVES_RUN"
#: Points per write request.
WRITE_BATCH = 1000


def curve_settings(environ: Mapping[str, str], argv: Sequence[str] | None = None
                   ) -> tuple[str, str, str] | None:
    """(tensorboard, experiment, run) this step writes its curves to; None when off."""
    tensorboard = environ.get(vertex_run.ENV_TENSORBOARD, "")
    if not vertex_run.TENSORBOARD.match(tensorboard):
        return None
    experiment = environ.get(ENV_CURVES_EXPERIMENT) or environ.get(vertex_run.ENV_EXPERIMENT, "")
    run = environ.get(ENV_CURVES_RUN, "")
    if not run and experiment:
        from gkeflow.components.tracking.pipeline_run import pipeline_run

        run_id = pipeline_run(environ, argv)[0]
        run = vertex_run.experiment_run_name(experiment, run_id) if run_id else ""
    return (tensorboard, experiment, run) if experiment and run else None


class CurveWriter:
    """Writes one experiment run's curves; disabled after its first failure."""

    def __init__(self, tensorboard: str, experiment: str, run: str,
                 environ: Mapping[str, str], log: Callable[[str], None] = print):
        project, location, _ = vertex_run.TENSORBOARD.match(tensorboard).groups()
        self.tensorboard, self.experiment, self.run = tensorboard, experiment, run
        self.run_name = vertex_run.tensorboard_run_name(tensorboard, experiment, run)
        self._env = {vertex_run.ENV_PROJECT: project, vertex_run.ENV_LOCATION: location,
                     vertex_run.ENV_ENDPOINT: environ.get(vertex_run.ENV_ENDPOINT, "")}
        self._log = log
        self._client: Any = None
        self._call: Any = None
        self._series: dict[str, str] = {}  # display name -> time series id
        self.enabled = True

    def write(self, step: int, values: Mapping[str, float],
              wall_time: float | None = None) -> bool:
        """One epoch's values as points at ``step``; False (after one line) on failure."""
        if not self.enabled or not values:
            return False
        try:
            vertex_run.within(vertex_run.DEADLINE_S, lambda: self._write(
                step, values, time.time() if wall_time is None else wall_time),
                f"writing the curves of {self.run}")
        except Exception as exc:  # best effort: training goes on
            self.enabled = False
            self._log(f"vertex experiments: curves not written to TensorBoard run "
                      f"{self.run_name} ({one_line(exc)}); the run goes on")
            return False
        return True

    def _write(self, step: int, values: Mapping[str, float], wall_time: float) -> None:
        from google.cloud.aiplatform_v1 import types
        from google.protobuf import timestamp_pb2

        self.open()
        self._ensure_series(list(values))
        stamp = timestamp_pb2.Timestamp()
        stamp.FromNanoseconds(int(wall_time * 1e9))
        data = [types.TimeSeriesData(
            tensorboard_time_series_id=self._series[name],
            value_type=types.TensorboardTimeSeries.ValueType.SCALAR,
            values=[types.TimeSeriesDataPoint(step=int(step), wall_time=stamp,
                                              scalar=types.Scalar(value=float(value)))])
            for name, value in values.items()]
        for start in range(0, len(data), WRITE_BATCH):
            chunk = data[start:start + WRITE_BATCH]
            # not retried: a write whose answer was lost may have landed (no double points)
            self._call(f"write points to {self.run}", lambda chunk=chunk: (
                self._client.write_tensorboard_run_data(
                    tensorboard_run=self.run_name, time_series_data=chunk,
                    timeout=vertex_run.CALL_TIMEOUT_S)), idempotent=False)

    def open(self) -> None:
        """Make the TensorBoard experiment and run (kept when they exist); raises on
        failure."""
        if self._client is None:
            _, self._call = vertex_run.session(self._env)
            self._client = vertex_run.ensure_tensorboard_run(
                self.tensorboard, self.experiment, self.run, self._call)

    def _ensure_series(self, names: list[str]) -> None:
        from google.cloud.aiplatform_v1 import types

        missing = [n for n in names if n not in self._series]
        if not missing:
            return
        self._read_series()
        for name in [n for n in missing if n not in self._series]:
            try:
                made = self._call(f"create time series {name}", lambda n=name: (
                    self._client.create_tensorboard_time_series(
                        parent=self.run_name, tensorboard_time_series=types.TensorboardTimeSeries(
                            display_name=n,
                            value_type=types.TensorboardTimeSeries.ValueType.SCALAR),
                        timeout=vertex_run.CALL_TIMEOUT_S)), idempotent=False)
                self._series[name] = made.name.rsplit("/", 1)[-1]
            except Exception as exc:  # 409: made meanwhile (a retried step): read it back
                if vertex_run.status_of(exc) != 409:
                    raise
                self._read_series()

    def _read_series(self) -> None:
        found = self._call(f"list the time series of {self.run}", lambda: list(
            self._client.list_tensorboard_time_series(parent=self.run_name,
                                                      timeout=vertex_run.CALL_TIMEOUT_S)))
        self._series.update({s.display_name: s.name.rsplit("/", 1)[-1] for s in found})


def open_writer(environ: Mapping[str, str], argv: Sequence[str] | None = None,
                log: Callable[[str], None] = print) -> CurveWriter | None:
    """The step's curve writer, or None when its environment asks for none."""
    settings = curve_settings(environ, argv)
    return CurveWriter(*settings, environ, log) if settings else None


def vertex_curves(writer: CurveWriter | None):
    """A Keras callback writing each epoch's values as it ends; None without a writer."""
    if writer is None:
        return None
    import keras

    from gkeflow.components.tracking.live import epoch_values

    class VertexCurves(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            writer.write(epoch + 1, epoch_values(logs, self.model))

    return VertexCurves()
