"""A cheaper form of one check KFP makes on every task setting.

``kfp.dsl.PipelineTask._ensure_container_spec_exists`` (KFP 2.x) runs before each
``set_cpu_limit``, ``set_memory_request``, ``set_accelerator_type``... and finds the name of
the method that called it with ``inspect.stack()``, which reads the source lines of every
frame on the stack. With gkeflow setting five to eight resources on every step, that was
most of the time spent building a pipeline (``gkeflow compile``, ``submit``, ``schedule
apply``, and the test suite). :func:`install` replaces the check with one that names the
caller from its frame (``sys._getframe``): the same condition, the same error message.
It leaves KFP alone when the check is not the one it knows (a KFP release that changed it).
"""

from __future__ import annotations

import sys


def _ensure_container_spec_exists(self) -> None:
    """Ensures that the task has a container spec."""
    if self.container_spec is None:
        caller_method_name = sys._getframe(1).f_code.co_name
        raise ValueError(
            f"{caller_method_name} can only be used on single-step components, not pipelines "
            "used as components, or special components like importers.")


def install() -> bool:
    """Replace KFP's check (once); False when KFP's is not the ``inspect.stack`` form."""
    from kfp.dsl.pipeline_task import PipelineTask

    current = PipelineTask._ensure_container_spec_exists
    if current is _ensure_container_spec_exists:
        return True
    if "stack" not in current.__code__.co_names:
        return False
    PipelineTask._ensure_container_spec_exists = _ensure_container_spec_exists
    return True
