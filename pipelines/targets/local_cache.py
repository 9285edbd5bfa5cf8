"""kfp.local's step cache, made to hit for steps that log metrics.

kfp.local (2.17) treats a cache entry as a miss when any output artifact's local file is
missing, to avoid serving broken URIs. Metrics artifacts (``Output[Metrics]``,
``Output[ClassificationMetrics]``) carry everything in their metadata and never get a file,
so a step that logs metrics (training) would never be served from cache locally, although
the KFP and Vertex backends cache it. :func:`metadata_only_artifacts_hit` accepts a missing
file for those metadata-only types, and for nothing else, while a local run lasts.

kfp.local also says nothing visible when it serves a step from cache; while the context is
active each hit prints ``CACHE_HIT <task>`` (on the run's log stream), so the run can report
the step as cached.
"""

from __future__ import annotations

import contextlib
import os

CACHE_HIT = "gkeflow: served from cache:"

#: Artifact types whose content is their metadata: no file is ever written for them.
METADATA_ONLY = frozenset({"system.Metrics", "system.ClassificationMetrics",
                           "system.SlicedClassificationMetrics"})


@contextlib.contextmanager
def metadata_only_artifacts_hit():
    from kfp.local import cache

    original = cache.LocalCache.__dict__["_deserialize_artifact"]

    def patched(data):
        uri = data.get("uri", "")
        if data.get("schema_title") in METADATA_ONLY and uri and not os.path.exists(uri):
            from kfp.dsl import executor

            return executor.create_artifact_instance({
                "name": data.get("name", ""), "uri": uri,
                "metadata": data.get("metadata", {}) or {},
                "type": {"schemaTitle": data["schema_title"]}})
        return original.__func__(data)

    original_key, original_get = cache.LocalCache.compute_key, cache.LocalCache.get
    names: dict[str, str] = {}

    def compute_key(self, component_name, *args, **kwargs):
        key = original_key(self, component_name, *args, **kwargs)
        names[key] = component_name.removeprefix("comp-")
        return key

    def get(self, key):
        outputs = original_get(self, key)
        if outputs is not None and key in names:
            print(f"{CACHE_HIT} {names[key]}", flush=True)
        return outputs

    cache.LocalCache._deserialize_artifact = staticmethod(patched)
    cache.LocalCache.compute_key, cache.LocalCache.get = compute_key, get
    try:
        yield
    finally:
        cache.LocalCache._deserialize_artifact = original
        cache.LocalCache.compute_key, cache.LocalCache.get = original_key, original_get
