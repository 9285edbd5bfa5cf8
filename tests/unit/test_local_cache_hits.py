"""kfp.local's cache patch: hits reach the run that asked, whatever happens to stdout, and
kfp's own methods come back however overlapping runs end."""

from __future__ import annotations

import io
import sys

from kfp.local import cache

from gkeflow.pipelines.targets.local_cache import metadata_only_artifacts_hit


def _kfp_methods():
    return {name: cache.LocalCache.__dict__[name]
            for name in ("_deserialize_artifact", "compute_key", "get")}


def _store(root, name: str = "comp-train-model") -> tuple[cache.LocalCache, str]:
    local = cache.LocalCache(str(root))
    key = local.compute_key(component_name=name, image="python:3.11", full_command=["x"],
                            arguments={}, env_vars={}, custom_cache_key=None)
    local.put(key, {"rows": 42})
    return local, key


def test_a_hit_reaches_the_run_even_when_stdout_was_swapped(tmp_path):
    hits: list[str] = []
    local, _ = _store(tmp_path)
    with metadata_only_artifacts_hit(hits.append) as served:
        saved, sys.stdout = sys.stdout, io.StringIO()  # another thread's redirect
        try:
            key = local.compute_key(component_name="comp-train-model", image="python:3.11",
                                    full_command=["x"], arguments={}, env_vars={},
                                    custom_cache_key=None)
            assert local.get(key) == {"rows": 42}
        finally:
            sys.stdout = saved
    assert hits == ["train-model"]
    assert served == {"train-model": {"artifacts": {}, "parameters": {"rows": 42}}}


def test_overlapping_runs_ending_out_of_order_restore_kfp(tmp_path):
    original = _kfp_methods()
    first_hits: list[str] = []
    second_hits: list[str] = []
    local, key = _store(tmp_path)
    first = metadata_only_artifacts_hit(first_hits.append)
    second = metadata_only_artifacts_hit(second_hits.append)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the older run ends first
    assert _kfp_methods() != original  # the newer run is still patched
    local.compute_key(component_name="comp-train-model", image="python:3.11",
                      full_command=["x"], arguments={}, env_vars={}, custom_cache_key=None)
    local.get(key)
    second.__exit__(None, None, None)
    assert second_hits == ["train-model"] and first_hits == []
    assert _kfp_methods() == original
