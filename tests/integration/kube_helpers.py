"""What the JobSet launcher tests share: a client for the fake API, a JobSet to launch, a
fast retry policy that records its waits, and the chief publishing its model."""

from __future__ import annotations

from kubernetes import client

from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout import storage
from gkeflow.components.scaleout.kube import KubeApi
from gkeflow.pipelines.compute.engines.gke import jobset_template
from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

NS = "kubeflow"
NAME = "gkeflow-train-0123456789abcdef"
CHIEF = f"{NAME}-worker-0-0-abcde"
SUMMARY = {"metrics": {"train_loss": 0.1}, "examples_per_s": 100.0, "epochs_run": 2,
           "best_epoch": 2, "features": ["x"], "strategy": "MultiWorkerMirroredStrategy over 2 "
           "workers", "workers": 2, "precision": "float32"}


def manifest(name: str = NAME, replicas: int = 2) -> dict:
    profile = DEFAULT_COMPUTE["train-model"].with_overrides(replicas=replicas)
    return js.finish(jobset_template(profile, "gkeflow-gpu:test"), name, NS, "",
                     ["--dataset", "gs://b/d"])


def api_client(url: str) -> client.ApiClient:
    """As :func:`~gkeflow.components.scaleout.jobset_launcher.in_cluster_client` makes it:
    no retries inside urllib3, so every request the launcher makes reaches the fake."""
    configuration = client.Configuration(host=url)
    configuration.retries = False
    return client.ApiClient(configuration)


def api_for(kube) -> KubeApi:
    return KubeApi(api_client(kube.url))


class Waits(list):
    """The retry policy's sleeps (real, but short)."""

    def __call__(self, seconds: float) -> None:
        import time

        self.append(seconds)
        time.sleep(seconds)


def fast_policy(waits: Waits | None = None, budget_s: float = 30.0,
                call_timeout_s: float = 0.5) -> RetryPolicy:
    """Backoff 10 ms doubling to 160 ms, no jitter (so the waits can be checked)."""
    return RetryPolicy(call_timeout_s=call_timeout_s, budget_s=budget_s, initial_s=0.01,
                       maximum_s=0.16, sleep=waits if waits is not None else Waits(),
                       jitter=lambda delay: delay)


def publisher(tmp_path, output: str):
    """What the chief does on success: publish a model and its summary at ``output``."""
    def publish(_manifest):
        source = tmp_path / "chief-model"
        source.mkdir(exist_ok=True)
        (source / "saved_model.pb").write_bytes(b"model")
        storage.publish(source, output, SUMMARY)
    return publish
