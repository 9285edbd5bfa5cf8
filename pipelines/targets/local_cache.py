"""kfp.local's step cache, made to hit for steps that log metrics.

kfp.local (2.17) treats a cache entry as a miss when any output artifact's local file is
missing, to avoid serving broken URIs. Metrics artifacts (``Output[Metrics]``,
``Output[ClassificationMetrics]``) carry everything in their metadata and never get a file,
so a step that logs metrics (training) would never be served from cache locally, although
the KFP and Vertex backends cache it. :func:`metadata_only_artifacts_hit` accepts a missing
file for those metadata-only types, and for nothing else, while a local run lasts.

kfp.local also says nothing visible when it serves a step from cache; while the context is
active each hit is handed to ``on_hit`` (the task's name), so the run can report the step as
cached, and the outputs it served are kept (:func:`served_outputs`): a cached step
writes nothing into the new run's folder, so its model, report and metadata are read from
the run that made them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

CACHE_HIT = "gkeflow: served from cache:"

#: Artifact types whose content is their metadata: no file is ever written for them.
METADATA_ONLY = frozenset({"system.Metrics", "system.ClassificationMetrics",
                           "system.SlicedClassificationMetrics"})


def served_outputs(outputs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A cache entry's outputs as plain data: ``artifacts`` (name -> ``{"uri", "metadata"}``,
    the first of a list) and ``parameters`` (name -> value)."""
    artifacts: dict[str, Any] = {}
    parameters: dict[str, Any] = {}
    for name, value in outputs.items():
        if isinstance(value, list) and value and hasattr(value[0], "uri"):
            value = value[0]
        if hasattr(value, "uri") and hasattr(value, "metadata"):
            artifacts[name] = {"uri": value.uri, "metadata": dict(value.metadata or {})}
        else:
            parameters[name] = value
    return {"artifacts": artifacts, "parameters": parameters}


class _Run:
    """What one local run's cache hits are recorded into."""

    def __init__(self, on_hit: Callable[[str], None] | None) -> None:
        self.on_hit = on_hit
        self.names: dict[str, str] = {}
        self.served: dict[str, dict[str, dict[str, Any]]] = {}


#: The runs in progress in this process, the newest last; the patches serve the newest.
_RUNS: list[_Run] = []
#: kfp.local's own cache methods, saved before the first patch and restored when the last
#: run ends, whatever order runs overlapping in threads end in.
_KFP_METHODS: dict[str, Any] = {}
_LOCK = threading.Lock()


def _deserialize_artifact(data):
    uri = data.get("uri", "")
    if data.get("schema_title") in METADATA_ONLY and uri and not os.path.exists(uri):
        from kfp.dsl import executor

        return executor.create_artifact_instance({
            "name": data.get("name", ""), "uri": uri,
            "metadata": data.get("metadata", {}) or {},
            "type": {"schemaTitle": data["schema_title"]}})
    return _KFP_METHODS["_deserialize_artifact"].__func__(data)


def _compute_key(self, component_name, *args, **kwargs):
    key = _KFP_METHODS["compute_key"](self, component_name, *args, **kwargs)
    if _RUNS:
        _RUNS[-1].names[key] = component_name.removeprefix("comp-")
    return key


def _get(self, key):
    outputs = _KFP_METHODS["get"](self, key)
    run = _RUNS[-1] if _RUNS else None
    if outputs is not None and run is not None and key in run.names:
        run.served[run.names[key]] = served_outputs(outputs)
        if run.on_hit is not None:
            run.on_hit(run.names[key])
    return outputs


@contextlib.contextmanager
def metadata_only_artifacts_hit(on_hit: Callable[[str], None] | None = None):
    """Patch kfp.local's cache while a local run lasts; yields task -> the outputs the cache
    served it (see :func:`served_outputs`). ``on_hit`` is called with each served task's
    name, in the thread that asked the cache (a direct call: nothing goes through stdout,
    which another thread may redirect meanwhile)."""
    from kfp.local import cache

    run = _Run(on_hit)
    with _LOCK:
        if not _RUNS:
            _KFP_METHODS.update({name: cache.LocalCache.__dict__[name] for name in
                                 ("_deserialize_artifact", "compute_key", "get")})
            cache.LocalCache._deserialize_artifact = staticmethod(_deserialize_artifact)
            cache.LocalCache.compute_key, cache.LocalCache.get = _compute_key, _get
        _RUNS.append(run)
    try:
        yield run.served
    finally:
        with _LOCK:
            _RUNS.remove(run)
            if not _RUNS:
                for name, method in _KFP_METHODS.items():
                    setattr(cache.LocalCache, name, method)
