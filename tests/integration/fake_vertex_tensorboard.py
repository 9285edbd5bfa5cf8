"""Vertex AI TensorBoard (v1 REST) for the fake Vertex AI server: instances (seeded by the
test, as a team creates one), experiments, runs, scalar time series and their points, what
an experiment run's time series live in.

Bodies are parsed strictly with ``aiplatform_v1`` types; answers follow the service: 404
NOT_FOUND for a missing parent or resource, 409 ALREADY_EXISTS for a second create under
one id (and for a second time series of one display name in a run), 400 for a run without
a display name, a time series without a display name or value type, a point of the wrong
type or a time series id the run does not have. Points are kept per time series, in the
order written.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from google.cloud import aiplatform_v1 as v1

TENSORBOARD = r"projects/[^/]+/locations/[^/]+/tensorboards/[^/:]+"
RESOURCE_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")


class FakeTensorboard:
    """The TensorBoard instances of one fake Vertex AI server (its lock held by the caller)."""

    def __init__(self, server):
        self.server = server
        self.instances: set[str] = set()
        self.experiments: dict[str, v1.TensorboardExperiment] = {}
        self.runs: dict[str, v1.TensorboardRun] = {}
        self.series: dict[str, v1.TensorboardTimeSeries] = {}
        self.points: dict[str, list[tuple[int, float, float]]] = {}  # series -> points

    def handles(self, path: str) -> bool:
        return "/tensorboards/" in path

    def curves(self, run: str) -> dict[str, list[tuple[int, float, float]]]:
        """display name -> [(step, wall time, value)] of ``run``'s time series."""
        return {s.display_name: self.points.get(name, []) for name, s in self.series.items()
                if name.startswith(f"{run}/timeSeries/")}

    def route(self, record) -> tuple[int, Any]:
        from tests.integration.fakes import Invalid

        path, method = record.path, record.method
        match = re.fullmatch(rf"/v1/({TENSORBOARD})", path)
        if match and method == "GET":
            self._only_query(record, set())
            return 200, self._json(self._instance(match[1]))
        match = re.fullmatch(rf"/v1/({TENSORBOARD})/experiments", path)
        if match and method == "POST":
            return 200, self._json(self._create(
                record, match[1], self._instance, v1.TensorboardExperiment,
                "tensorboardExperimentId", "experiments", self.experiments))
        match = re.fullmatch(rf"/v1/({TENSORBOARD}/experiments/[^/:]+)", path)
        if match and method == "GET":
            self._only_query(record, set())
            return 200, self._json(self._get(self.experiments, match[1]))
        match = re.fullmatch(rf"/v1/({TENSORBOARD}/experiments/[^/:]+)/runs", path)
        if match and method == "POST":
            return 200, self._json(self._create(
                record, match[1], lambda name: self._get(self.experiments, name),
                v1.TensorboardRun, "tensorboardRunId", "runs", self.runs))
        run = rf"{TENSORBOARD}/experiments/[^/:]+/runs/[^/:]+"
        match = re.fullmatch(rf"/v1/({run})", path)
        if match and method == "GET":
            self._only_query(record, set())
            return 200, self._json(self._get(self.runs, match[1]))
        match = re.fullmatch(rf"/v1/({run})/timeSeries", path)
        if match and method == "GET":
            self._only_query(record, {"pageSize", "pageToken", "filter", "orderBy",
                                      "readMask"})
            self._get(self.runs, match[1])
            found = [self._json(s) for name, s in self.series.items()
                     if name.startswith(f"{match[1]}/timeSeries/")]
            return 200, {"tensorboardTimeSeries": found}
        if match and method == "POST":
            return 200, self._json(self._create_series(match[1], record))
        match = re.fullmatch(rf"/v1/({run}):write", path)
        if match and method == "POST":
            self._only_query(record, set())
            self._write(match[1], record)
            return 200, {}
        raise Invalid(f"the fake does not implement {method} {path}")

    def _json(self, message) -> dict:
        return self.server._json(message)

    @staticmethod
    def _only_query(record, allowed: set[str]) -> None:
        from tests.integration.fakes import Invalid

        unknown = set(record.query) - allowed - {"$alt"}
        if unknown:
            raise Invalid(f"unknown query parameters {sorted(unknown)}")

    def _instance(self, name: str) -> v1.Tensorboard:
        if name not in self.instances:
            raise LookupError(f"Tensorboard {name} not found")
        return v1.Tensorboard(name=name, display_name=name.rsplit("/", 1)[-1])

    @staticmethod
    def _get(kept: dict, name: str):
        if name not in kept:
            raise LookupError(f"{name} not found")
        return kept[name]

    def _create(self, record, parent: str, check_parent, message_type, id_field: str,
                collection: str, kept: dict):
        from tests.integration.fakes import Conflict, Invalid

        self._only_query(record, {id_field})
        check_parent(parent)
        item = self.server._parse(message_type, record.body, f"{message_type.__name__} body")
        item_id = record.query.get(id_field, [""])[0]
        if not RESOURCE_ID.match(item_id):
            raise Invalid(f"{id_field} {item_id!r} is not a resource id")
        if item.name:
            raise Invalid(f"{message_type.__name__}.name is output only")
        if message_type is v1.TensorboardRun and not item.display_name:
            raise Invalid("TensorboardRun.displayName is required")
        item.name = f"{parent}/{collection}/{item_id}"
        if item.name in kept:
            raise Conflict(f"{item.name} already exists")
        item.create_time = item.update_time = dt.datetime.now(dt.UTC)
        kept[item.name] = item
        return item

    def _create_series(self, run: str, record) -> v1.TensorboardTimeSeries:
        from tests.integration.fakes import Conflict, Invalid

        self._only_query(record, {"tensorboardTimeSeriesId"})
        self._get(self.runs, run)
        series = self.server._parse(v1.TensorboardTimeSeries, record.body,
                                    "TensorboardTimeSeries body")
        if not series.display_name or series.name:
            raise Invalid("TensorboardTimeSeries.displayName is required and name is output "
                          "only")
        if series.value_type == v1.TensorboardTimeSeries.ValueType.VALUE_TYPE_UNSPECIFIED:
            raise Invalid("TensorboardTimeSeries.valueType is required")
        if any(s.display_name == series.display_name for name, s in self.series.items()
               if name.startswith(f"{run}/timeSeries/")):
            raise Conflict(f"a time series {series.display_name!r} exists in {run}")
        series.name = f"{run}/timeSeries/{self.server.new_id()}"
        series.create_time = series.update_time = dt.datetime.now(dt.UTC)
        self.series[series.name] = series
        return series

    def _write(self, run: str, record) -> None:
        from tests.integration.fakes import Invalid

        self._get(self.runs, run)
        request = self.server._parse(v1.WriteTensorboardRunDataRequest, record.body,
                                     "WriteTensorboardRunDataRequest body")
        if request.tensorboard_run:
            raise Invalid("the run belongs in the URL, not the body")
        if not request.time_series_data:
            raise Invalid("timeSeriesData is required")
        for data in request.time_series_data:
            name = f"{run}/timeSeries/{data.tensorboard_time_series_id}"
            series = self.series.get(name)
            if series is None:
                raise Invalid(f"time series {data.tensorboard_time_series_id!r} is not in "
                              f"{run}")
            if data.value_type != series.value_type:
                raise Invalid(f"{name} holds {series.value_type.name}, not "
                              f"{data.value_type.name}")
            for point in data.values:
                if "scalar" not in point:
                    raise Invalid(f"a point of {name} has no scalar value")
                self.points.setdefault(name, []).append(
                    (point.step, point.wall_time.timestamp(), point.scalar.value))
