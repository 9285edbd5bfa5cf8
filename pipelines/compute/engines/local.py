"""Local engine: ``replicas`` training workers as processes on loopback (``kfp.local``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile


class LocalWorkers:
    name = "local"
    runs_any_component = False

    def describe(self, profile: ComputeProfile, step: str = "train-model") -> str:
        return (f"{step} runs {profile.replicas} worker processes on this machine "
                "(MultiWorkerMirroredStrategy over loopback)")

    def applies(self, profile: ComputeProfile) -> bool:
        return profile.replicas > 1

    def task(self, profile: ComputeProfile, arguments: dict[str, Any],
             env: Mapping[str, str] | None = None, component=None):
        if component is not None:
            raise ComputeError("the local worker engine runs train_model only")
        from gkeflow.components.scaleout.component import train_model_local_workers
        from gkeflow.pipelines.compute.engines import (
            as_training_step,
            keras_arguments,
            refuse_env,
        )

        refuse_env("local worker", env)

        step = as_training_step(train_model_local_workers)
        return step(replicas=profile.replicas, **keras_arguments(arguments))

    def machine(self, profile: ComputeProfile) -> str:
        return ""

    def launcher_profile(self, profile: ComputeProfile) -> ComputeProfile:
        return profile


ENGINE = LocalWorkers()
