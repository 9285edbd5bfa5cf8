"""The cheaper container-spec check behaves as KFP's: same condition, same message."""

import pytest
from kfp import dsl
from kfp.dsl.pipeline_task import PipelineTask

from gkeflow.pipelines.compute import kfp_task_check


@dsl.component(base_image="python:3.11")
def _step(x: int) -> int:
    return x


@dsl.pipeline
def _inner(x: int = 1) -> int:
    return _step(x=x).output


def test_it_replaces_kfps_stack_reading_check_and_keeps_its_behaviour():
    assert kfp_task_check.install() and kfp_task_check.install()  # idempotent
    assert PipelineTask._ensure_container_spec_exists is \
        kfp_task_check._ensure_container_spec_exists
    with pytest.raises(ValueError, match="^set_cpu_limit can only be used on single-step "
                                         "components, not pipelines used as components"):
        @dsl.pipeline
        def outer():
            _inner(x=2).set_cpu_limit("1")

    @dsl.pipeline
    def fine():
        _step(x=2).set_cpu_limit("1").set_memory_limit("1G")

    spec = fine.pipeline_spec.deployment_spec["executors"]
    (executor,) = spec.values()
    assert executor["container"]["resources"]["resourceCpuLimit"] == "1"


def test_it_leaves_a_check_of_another_form_alone(monkeypatch):
    def other(self):
        return None

    monkeypatch.setattr(PipelineTask, "_ensure_container_spec_exists", other)
    assert not kfp_task_check.install()
    assert PipelineTask._ensure_container_spec_exists is other
