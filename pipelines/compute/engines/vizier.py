"""``engine: vizier``: the compile-time half of a Vertex AI hyperparameter tuning job.

:func:`tuning_spec` turns a :class:`SweepConfig` and the trial step's compute profile into
a JSON spec (study, machine, scheduling) compiled into ``compiled/sweep.vertex.yaml``; at
run time :mod:`gkeflow.components.sweep.vizier` fills in the data, the image, the output
directory and the run's identity and submits the ``HyperparameterTuningJob``.
"""

from __future__ import annotations

import json

from gkeflow.pipelines.compute import tpu_profile
from gkeflow.pipelines.compute.profiles import (
    GKE_TO_VERTEX_ACCELERATOR,
    ComputeError,
    ComputeProfile,
    fitting_shape,
)
from gkeflow.pipelines.settings.sweep_config import (
    TUNABLE,
    Choice,
    IntRange,
    LogUniform,
    SweepConfig,
    Uniform,
)

#: Vertex AI Scheduling.Strategy names per ComputeProfile.scheduling (a reservation is
#: standard capacity taken from the reservation the machine spec names).
STRATEGIES = {"standard": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START",
              "reservation": "STANDARD"}


def study_parameters(sweep: SweepConfig) -> list[dict]:
    """``StudySpec.ParameterSpec`` JSON for each searched hyperparameter."""
    specs = []
    for name, spec in sweep.parameters.items():
        entry: dict = {"parameterId": name}
        if isinstance(spec, LogUniform):
            entry["doubleValueSpec"] = {"minValue": spec.min, "maxValue": spec.max}
            entry["scaleType"] = "UNIT_LOG_SCALE"
        elif isinstance(spec, Uniform):
            entry["doubleValueSpec"] = {"minValue": spec.min, "maxValue": spec.max}
            entry["scaleType"] = "UNIT_LINEAR_SCALE"
        elif isinstance(spec, IntRange):
            if spec.step == 1:
                entry["integerValueSpec"] = {"minValue": str(spec.min),
                                             "maxValue": str(spec.max)}
                entry["scaleType"] = "UNIT_LINEAR_SCALE"
            else:
                entry["discreteValueSpec"] = {"values": [float(v) for v in spec.grid()]}
        elif isinstance(spec, Choice):
            if TUNABLE[name][0] is str:
                entry["categoricalValueSpec"] = {"values": [str(v) for v in spec.values]}
            else:
                entry["discreteValueSpec"] = {"values": sorted({float(v) for v in spec.values})}
        specs.append(entry)
    return specs


def tuning_spec(sweep: SweepConfig, profile: ComputeProfile) -> str:
    """The compile-time part of the tuning job, as JSON (a pipeline-step parameter)."""
    if profile.replicas > 1:
        raise ComputeError("engine: vizier runs each trial on one machine; set "
                           "compute.train-model.replicas to 1 or use engine: kfp")
    machine: dict = {}
    shape = fitting_shape(profile, "vertex") if not profile.uses_tpu else None
    if profile.uses_tpu:  # a single-host slice: its machine type and topology
        spec = tpu_profile.vertex_machine_spec(profile)
        machine.update(machineType=spec["machine_type"], tpuTopology=spec["tpu_topology"])
    elif shape is None:
        raise ComputeError("compute.train-model: no Vertex AI machine fits the trial's "
                           "request; lower cpu/memory or the accelerator count")
    else:
        machine["machineType"] = shape.name
    if profile.uses_gpu:
        machine["acceleratorType"] = GKE_TO_VERTEX_ACCELERATOR[profile.accelerator]
        machine["acceleratorCount"] = profile.accelerator_count
    if profile.scheduling == "reservation":
        # MachineSpec.reservation_affinity: the reservation's full name, with its zone.
        machine["reservationAffinity"] = {
            "reservationAffinityType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [profile.reservation],
        }
    scheduling: dict = {"strategy": STRATEGIES.get(profile.scheduling, "STANDARD")}
    if profile.timeout_s:
        scheduling["timeout"] = f"{profile.timeout_s}s"
    if profile.max_wait and profile.scheduling == "flex-start":
        from gkeflow.pipelines.compute.profiles import to_seconds

        scheduling["maxWaitDuration"] = f"{to_seconds('max_wait', profile.max_wait)}s"
    return json.dumps({
        "studySpec": {
            "metrics": [{"metricId": sweep.metric, "goal": sweep.direction.upper()}],
            "parameters": study_parameters(sweep),
            "algorithm": "GRID_SEARCH" if sweep.algorithm == "grid" else "RANDOM_SEARCH",
        },
        "maxTrialCount": sweep.trial_count(),
        "parallelTrialCount": sweep.parallel_trials,
        # The sweep fails only when every trial failed.
        "maxFailedTrialCount": sweep.trial_count(),
        "machineSpec": machine,
        "scheduling": scheduling,
    }, sort_keys=True)
