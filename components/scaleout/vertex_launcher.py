"""Run a Vertex AI CustomJob from a pipeline step, then wait for it (the launcher module).

The compiled payload (:mod:`gkeflow.pipelines.engines.vertex`) arrives with the step's
executor input already substituted by Vertex AI Pipelines. The launcher:

- gives the job the pipeline job's service account and network unless the payload sets them;
- labels the job with a key derived from the pipeline job and task, so a retried launcher
  finds the job its earlier attempt created and follows it instead of creating a second one
  (a failed or cancelled earlier job is replaced);
- writes ``gcp_resources`` naming the job, so cancelling the pipeline cancels the job;
- waits for the job, cancels it on SIGTERM, and exits non-zero when it fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

LAUNCH_LABEL = "gkeflow-launch"
TERMINAL_FAILED = {"JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_CANCELLING",
                   "JOB_STATE_EXPIRED"}
SUCCEEDED = "JOB_STATE_SUCCEEDED"
REQUEST_TIMEOUT_S = 60.0


class CustomJobFailed(RuntimeError):
    """The CustomJob failed or was cancelled; the message carries Vertex AI's error."""


def launch_key(pipeline_job: str, task_name: str) -> str:
    """A label value (lowercase, <= 63 characters) the same on every attempt of one task."""
    return hashlib.sha256(f"{pipeline_job}\0{task_name}".encode()).hexdigest()[:40]


def _resolved(value: str) -> str:
    return "" if not value or "{{" in value else value


def validated_job(payload: dict):
    """``payload`` as an ``aiplatform_v1.CustomJob``; unknown fields are an error."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    message = aiplatform_v1.CustomJob.pb(aiplatform_v1.CustomJob())
    json_format.ParseDict(payload, message, ignore_unknown_fields=False)
    return aiplatform_v1.CustomJob.wrap(message)


def clients(location: str, api_endpoint: str = "", credentials=None):
    """(JobServiceClient, PipelineServiceClient) for ``location`` over REST."""
    from google.api_core.client_options import ClientOptions
    from google.cloud import aiplatform_v1

    options = ClientOptions(api_endpoint=api_endpoint or f"{location}-aiplatform.googleapis.com")
    return (aiplatform_v1.JobServiceClient(client_options=options, transport="rest",
                                           credentials=credentials),
            aiplatform_v1.PipelineServiceClient(client_options=options, transport="rest",
                                                credentials=credentials))


def gcp_resources(job_name: str, location: str) -> str:
    """The ``gcp_resources`` document Vertex AI Pipelines reads to cancel the job."""
    return json.dumps({"resources": [{
        "resourceType": "CustomJob",
        "resourceUri": f"https://{location}-aiplatform.googleapis.com/v1/{job_name}",
    }]})


def run_custom_job(job_client, pipeline_client, project: str, location: str, payload: dict,
                   pipeline_job: str, task_name: str, gcp_resources_path: str = "",
                   poll_s: float = 20.0, echo: Callable[[str], None] = print):
    """Create (or re-attach to) the CustomJob and wait for it; returns the finished job."""
    payload = json.loads(json.dumps(payload))
    spec = payload.setdefault("job_spec", {})
    pipeline_job = _resolved(pipeline_job)
    if pipeline_job and not (spec.get("service_account") and spec.get("network")):
        parent_job = pipeline_client.get_pipeline_job(name=pipeline_job,
                                                      timeout=REQUEST_TIMEOUT_S)
        if parent_job.service_account and not spec.get("service_account"):
            spec["service_account"] = parent_job.service_account
        if parent_job.network and not spec.get("network"):
            spec["network"] = parent_job.network
    key = launch_key(pipeline_job, task_name)
    payload.setdefault("labels", {})[LAUNCH_LABEL] = key
    job = validated_job(payload)
    parent = f"projects/{project}/locations/{location}"

    from google.cloud import aiplatform_v1

    listing = aiplatform_v1.ListCustomJobsRequest(parent=parent,
                                                  filter=f'labels.{LAUNCH_LABEL}="{key}"')

    def live_jobs():
        return [j for j in job_client.list_custom_jobs(request=listing,
                                                       timeout=REQUEST_TIMEOUT_S)
                if j.state.name not in TERMINAL_FAILED and j.state.name != SUCCEEDED]

    def on_sigterm(signum, frame):
        raise _SigTerm()

    # Handle SIGTERM before creating anything, so a cancel never leaves a job running.
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        existing = [j for j in job_client.list_custom_jobs(request=listing,
                                                           timeout=REQUEST_TIMEOUT_S)
                    if j.state.name not in TERMINAL_FAILED]
        if existing:
            current = existing[0]
            echo(f"re-attaching to CustomJob {current.name} ({current.state.name}), created by "
                 "an earlier attempt of this step")
        else:
            current = job_client.create_custom_job(parent=parent, custom_job=job,
                                                   timeout=REQUEST_TIMEOUT_S)
            pools = [f"{p.replica_count} x {p.machine_spec.machine_type}"
                     for p in job.job_spec.worker_pool_specs]
            echo(f"created CustomJob {current.name}: {' + '.join(pools)}, "
                 f"{job.job_spec.scheduling.strategy.name}")
        if gcp_resources_path:
            Path(gcp_resources_path).parent.mkdir(parents=True, exist_ok=True)
            Path(gcp_resources_path).write_text(gcp_resources(current.name, location))
        last = ""
        while True:
            current = job_client.get_custom_job(name=current.name, timeout=REQUEST_TIMEOUT_S)
            if current.state.name != last:
                echo(f"CustomJob {current.name}: {current.state.name}")
                last = current.state.name
            if current.state.name == SUCCEEDED:
                return current
            if current.state.name in TERMINAL_FAILED:
                raise CustomJobFailed(f"CustomJob {current.name} ended {current.state.name}: "
                                      f"{current.error.message or 'no error message'}")
            time.sleep(poll_s)
    except _SigTerm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one cancel, even if SIGTERM repeats
        names = [j.name for j in live_jobs()]
        for name in names:
            job_client.cancel_custom_job(name=name, timeout=REQUEST_TIMEOUT_S)
        raise CustomJobFailed(f"cancelled (SIGTERM); cancelled {', '.join(names) or 'nothing'}"
                              ) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


class _SigTerm(BaseException):
    """SIGTERM arrived: the step is being cancelled."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gkeflow-vertex-launcher", description=__doc__)
    parser.add_argument("--payload", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--location", required=True)
    parser.add_argument("--pipeline_job", default="")
    parser.add_argument("--task_name", default="train-model")
    parser.add_argument("--gcp_resources", default="")
    parser.add_argument("--api_endpoint", default="", help="Override (tests, private endpoints).")
    parser.add_argument("--poll", type=float, default=20.0)
    args = parser.parse_args(argv)
    credentials = None
    if args.api_endpoint.startswith("http://"):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    job_client, pipeline_client = clients(args.location, args.api_endpoint, credentials)
    try:
        run_custom_job(job_client, pipeline_client, args.project, args.location,
                       json.loads(args.payload), args.pipeline_job, args.task_name,
                       args.gcp_resources, poll_s=args.poll)
    except CustomJobFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
