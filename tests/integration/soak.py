"""Soak of the Vertex AI launchers: a job of many simulated hours, followed over real HTTP
against :class:`~tests.integration.fake_vertex_jobs.FakeVertexJobs` while the fake injects
random transient faults (error statuses, dropped connections, lost answers, hung reads) on
every kind of call.

Time is simulated: the launcher's waits (the poll interval, the retry backoff) advance a
shared clock instead of sleeping, and the fake's jobs end when that clock has passed their
duration, so six hours of 20-second polls take seconds. A hung read costs the client its
real (short) call timeout and the simulated clock a full default call timeout (60 s).
Used by the soak tests and by ``bench/launchers.py``.
"""

from __future__ import annotations

import json
import random
import threading

from gkeflow.components.cloud.retry import RetryPolicy

LAUNCHERS = ("customjob", "tuning", "batch")
POLL_S = 20.0
PROJECT, LOCATION = "p", "us-central1"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"


class SimClock:
    """Simulated seconds; ``sleep`` advances them."""

    def __init__(self):
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def sim_policy(clock: SimClock, seed: int, call_timeout_s: float = 0.3,
               budget_s: float = 900.0) -> RetryPolicy:
    """The default policy's backoff on simulated time; a short real call timeout."""
    jitter = random.Random(seed)
    return RetryPolicy(call_timeout_s=call_timeout_s, budget_s=budget_s, sleep=clock.sleep,
                       clock=clock, jitter=lambda delay: jitter.uniform(delay / 2, delay))


def custom_job_payload() -> dict:
    return {"display_name": "train-model", "job_spec": {
        "worker_pool_specs": [{"machine_spec": {"machine_type": "g2-standard-8",
                                                "accelerator_type": "NVIDIA_L4",
                                                "accelerator_count": 1},
                               "replica_count": 1,
                               "container_spec": {"image_uri": "gcr.io/p/gpu:1",
                                                  "command": ["python"], "args": []}}],
        "scheduling": {"strategy": "SPOT", "timeout": "86400s"}}}


def tuning_body() -> dict:
    return {"displayName": "gkeflow-sweep-run-1", "maxTrialCount": 4, "parallelTrialCount": 2,
            "studySpec": {"metrics": [{"metricId": "eval_accuracy", "goal": "MAXIMIZE"}],
                          "parameters": [{"parameterId": "learning_rate",
                                          "doubleValueSpec": {"minValue": 1e-4,
                                                              "maxValue": 0.1}}]},
            "trialJobSpec": {"workerPoolSpecs": [{
                "machineSpec": {"machineType": "n1-standard-8"}, "replicaCount": "1",
                "containerSpec": {"imageUri": "gcr.io/p/gpu:1"}}],
                "baseOutputDirectory": {"outputUriPrefix": "gs://b/sweeps/run-1"}},
            "labels": {"gkeflow-run": "run-1"}}


def batch_body() -> dict:
    return {"displayName": "gkeflow-score-penguins-1", "model": f"{PARENT}/models/12@3",
            "inputConfig": {"instancesFormat": "jsonl",
                            "gcsSource": {"uris": ["gs://data/new.jsonl"]}},
            "outputConfig": {"predictionsFormat": "jsonl",
                             "gcsDestination": {"outputUriPrefix": "gs://out/preds"}},
            "dedicatedResources": {"machineSpec": {"machineType": "n1-standard-4"},
                                   "startingReplicaCount": 1, "maxReplicaCount": 1}}


def run_launcher(launcher: str, fake, policy: RetryPolicy, poll_s: float = POLL_S,
                 echo=lambda line: None, pipeline_job: str = f"{PARENT}/pipelineJobs/run-1",
                 gcp_resources_path: str = "", deadline_s: float = 24 * 3600.0):
    """Run one launcher against ``fake`` (a FakeVertexJobs) until it ends."""
    if launcher == "customjob":
        from gkeflow.components.scaleout import vertex_launcher as vl

        job_client, pipeline_client = vl.clients(LOCATION, fake.url)
        return vl.run_custom_job(job_client, pipeline_client, PROJECT, LOCATION,
                                 custom_job_payload(), pipeline_job, "train-model",
                                 gcp_resources_path, poll_s=poll_s, echo=echo, policy=policy,
                                 deadline_s=deadline_s)
    if launcher == "tuning":
        from gkeflow.components.sweep import vizier

        return vizier.submit_and_wait(tuning_body(), PROJECT, LOCATION, api_endpoint=fake.url,
                                      poll_s=poll_s, echo=echo, policy=policy,
                                      gcp_resources_path=gcp_resources_path,
                                      deadline_s=deadline_s)
    if launcher == "batch":
        from gkeflow.components.predict.vertex_batch import follow_batch_job

        return follow_batch_job(batch_body(), PARENT, "run-1", api_endpoint=fake.url,
                                policy=policy, poll_s=poll_s, timeout_s=deadline_s,
                                gcp_resources_path=gcp_resources_path, echo=echo)
    raise ValueError(f"unknown launcher {launcher!r}; one of {', '.join(LAUNCHERS)}")


def soak(launcher: str, seed: int = 0, hours: float = 6.0, fault_rate: float = 0.02) -> dict:
    """Follow one job of ``hours`` simulated hours with ``fault_rate`` random faults."""
    from tests.integration.fake_vertex_jobs import FakeVertexJobs
    from tests.integration.faults import Faults

    clock = SimClock()
    faults = Faults(rate=fault_rate, seed=seed, hang_s=0.8, on_hang=lambda: clock.sleep(60.0))
    with FakeVertexJobs(faults=faults, clock=clock, duration_s=hours * 3600) as fake:
        lines: list[str] = []
        run_launcher(launcher, fake, sim_policy(clock, seed), echo=lines.append)
        # read the fake's record after the job ended
        result = {"launcher": launcher, "soak_calls": fake.calls,
                  "faults_injected": faults.total, "jobs_created": len(fake.created),
                  "spurious_stops": len(fake.cancelled), "max_gap_s": round(fake.max_gap_s, 1),
                  "simulated_s": round(clock.now, 1), "violations": len(fake.violations),
                  "fault_kinds": dict(sorted(faults.injected.items())),
                  "retry_lines": sum("retrying in" in line for line in lines)}
    return result


def line(result: dict) -> str:
    """The one-line summary ``bench/launchers.py`` prints."""
    return (f"launcher={result['launcher']} soak_calls={result['soak_calls']} "
            f"faults_injected={result['faults_injected']} "
            f"jobs_created={result['jobs_created']} "
            f"spurious_stops={result['spurious_stops']} max_gap_s={result['max_gap_s']}")


if __name__ == "__main__":  # pragma: no cover - a quick look by hand
    print(json.dumps(soak("customjob", hours=1.0, fault_rate=0.05)))
