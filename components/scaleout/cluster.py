"""The cluster a multi-worker run forms, and the ``TF_CONFIG`` each worker reads.

One construction for every engine that has to build ``TF_CONFIG`` itself: a GKE JobSet
(stable pod host names behind its headless service, index from the Job's completion index)
and local worker processes on loopback. Vertex AI sets ``TF_CONFIG`` on its own replicas.
"""

from __future__ import annotations

import json
import os

#: Port every JobSet worker listens on for collective operations.
WORKER_PORT = 2222
#: The replicated job of a training JobSet.
REPLICATED_JOB = "worker"
#: Comma-separated ``host:port`` of every worker, chief (index 0) first.
HOSTS_ENV = "GKEFLOW_WORKER_HOSTS"
#: This worker's index; a JobSet pod reads the Job completion index instead.
INDEX_ENV = "GKEFLOW_WORKER_INDEX"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
#: On a JobSet pod: the index of its Job within the replicated job (from the pod's
#: ``jobset.sigs.k8s.io/job-index`` label) and how many pods each Job runs.
JOB_INDEX_ENV = "GKEFLOW_JOB_INDEX"
PODS_PER_JOB_ENV = "GKEFLOW_PODS_PER_JOB"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
#: On a pod of a JobSet's second replicated job (mixed capacity: ``chief`` then ``worker``):
#: how many workers come before its replicated job.
INDEX_OFFSET_ENV = "GKEFLOW_INDEX_OFFSET"


def jobset_hosts(jobset: str, replicas: int, subdomain: str = "",
                 replicated_job: str = REPLICATED_JOB, port: int = WORKER_PORT,
                 jobs: int = 1) -> list[str]:
    """``host:port`` of each pod of a JobSet's replicated job: ``jobs`` Jobs (the replicated
    job's ``replicas``) of ``replicas`` pods each (the Job's parallelism), in worker order:
    Job 0's pods first.

    JobSet names pods ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`` and resolves them as
    ``<hostname>.<subdomain>`` (the subdomain defaults to the JobSet's name).
    """
    if replicas < 1 or jobs < 1:
        raise ValueError(f"replicas must be >= 1 and jobs >= 1; got {replicas} and {jobs}")
    subdomain = subdomain or jobset
    return [f"{jobset}-{replicated_job}-{job}-{index}.{subdomain}:{port}"
            for job in range(jobs) for index in range(replicas)]


def loopback_hosts(ports: list[int]) -> list[str]:
    """``127.0.0.1:<port>`` for each port: workers as processes on this machine."""
    return [f"127.0.0.1:{port}" for port in ports]


def tf_config(hosts: list[str], index: int) -> str:
    """``TF_CONFIG`` for worker ``index`` of ``hosts`` (worker 0 is the chief that saves)."""
    if not hosts:
        raise ValueError("a cluster needs at least one worker")
    if not 0 <= index < len(hosts):
        raise ValueError(f"worker index {index} is outside 0..{len(hosts) - 1}")
    return json.dumps({"cluster": {"worker": list(hosts)},
                       "task": {"type": "worker", "index": index}})


def tf_config_from_env(environ: dict[str, str] | None = None) -> str:
    """``TF_CONFIG`` for this process from :data:`HOSTS_ENV` and its index, or ``""``.

    The index is :data:`INDEX_ENV`, else (a JobSet pod) the Job's index times the pods per
    Job plus the completion index Kubernetes sets on each pod of an Indexed Job. An existing
    ``TF_CONFIG`` (Vertex AI sets one) is kept.
    """
    environ = os.environ if environ is None else environ
    if environ.get("TF_CONFIG"):
        return environ["TF_CONFIG"]
    hosts = [h for h in environ.get(HOSTS_ENV, "").split(",") if h.strip()]
    if not hosts:
        return ""
    raw = environ.get(INDEX_ENV, "")
    if not raw.strip():
        raw = _jobset_index(environ)
    if not raw.strip().isdigit():
        raise ValueError(f"{HOSTS_ENV} names {len(hosts)} workers but neither {INDEX_ENV} nor "
                         f"{COMPLETION_INDEX_ENV} gives this worker's index")
    return tf_config(hosts, int(raw))


def _jobset_index(environ) -> str:
    """A JobSet pod's worker index: the workers of the replicated jobs before its own, plus
    its Job's index times the pods per Job, plus its completion index within the Job."""
    completion = environ.get(COMPLETION_INDEX_ENV, "").strip()
    job = environ.get(JOB_INDEX_ENV, "0").strip() or "0"
    per_job = environ.get(PODS_PER_JOB_ENV, "1").strip() or "1"
    offset = environ.get(INDEX_OFFSET_ENV, "0").strip() or "0"
    if not (completion.isdigit() and job.isdigit() and per_job.isdigit()
            and offset.isdigit()):
        return completion
    return str(int(offset) + int(job) * int(per_job) + int(completion))
