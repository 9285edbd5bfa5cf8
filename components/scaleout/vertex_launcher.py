"""Run a Vertex AI CustomJob from a pipeline step and follow it to its end.

The compiled payload (:mod:`gkeflow.pipelines.compute.engines.vertex`) arrives with the step's
executor input already substituted by Vertex AI Pipelines. The launcher:

- validates the payload as an ``aiplatform_v1.CustomJob`` before any call;
- gives the job the pipeline job's service account and network unless the payload sets
  them (that read is retried like every other call);
- labels the job with a key derived from the pipeline job and task, so a retried launcher
  follows the job its earlier attempt created instead of creating a second one (a job still
  cancelling is waited out; a failed or cancelled one is replaced);
- with MLflow tracking configured, hands the train-model step's run to the chief's
  container (:mod:`gkeflow.components.tracking.handoff`; found again by the job's label on
  a retry) and ends it when the job has ended;
- writes ``gcp_resources`` naming the job as soon as it exists, so cancelling the pipeline
  cancels the job;
- follows the job with :func:`gkeflow.components.cloud.follow.follow`: transient errors
  (429, 5xx, dropped connections, timeouts) are retried within the retry budget; SIGTERM
  or a final give-up cancels the job; every ending is one line on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable

from gkeflow.components.cloud import options
from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.tracking.handoff import open_remote_training
from gkeflow.components.tracking.pipeline_run import ARG_RUN_ID, ARG_RUN_NAME

LAUNCH_LABEL = "gkeflow-launch"
KIND = "CustomJob"


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

    from gkeflow.components.cloud.vertex import job_client

    if credentials is None and api_endpoint.startswith("http://"):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    options_ = ClientOptions(api_endpoint=api_endpoint or f"{location}-aiplatform.googleapis.com")
    return (job_client(location, api_endpoint, credentials),
            aiplatform_v1.PipelineServiceClient(client_options=options_, transport="rest",
                                                credentials=credentials))


def _inherit_pipeline_settings(pipeline_client, pipeline_job: str, spec: dict,
                               policy: RetryPolicy, echo: Callable[[str], None]) -> None:
    """Fill the job's service account and network from the pipeline job's (retried read)."""
    if not pipeline_job or (spec.get("service_account") and spec.get("network")):
        return
    parent_job = policy.call(
        lambda: pipeline_client.get_pipeline_job(name=pipeline_job,
                                                 timeout=policy.call_timeout_s, retry=None),
        f"reading PipelineJob {pipeline_job}", on_retry=echo)
    if parent_job.service_account and not spec.get("service_account"):
        spec["service_account"] = parent_job.service_account
    if parent_job.network and not spec.get("network"):
        spec["network"] = parent_job.network


def run_custom_job(job_client, pipeline_client, project: str, location: str, payload: dict,
                   pipeline_job: str, task_name: str, gcp_resources_path: str = "",
                   poll_s: float = 20.0, echo: Callable[[str], None] = print,
                   policy: RetryPolicy | None = None, deadline_s: float | None = None):
    """Create (or re-attach to) the CustomJob and follow it; returns the finished job.

    ``deadline_s`` (default: none; Vertex AI ends the job at its own
    ``scheduling.timeout``) makes the launcher give up and cancel the job after that long.

    Raises:
        gkeflow.components.cloud.follow.Ending: the job failed, the launcher was cancelled
            (SIGTERM) or gave up; the message is one line.
    """
    from gkeflow.components.cloud.follow import GaveUp
    from gkeflow.components.cloud.retry import describe_error
    from gkeflow.components.cloud.vertex import VertexJob, follow_vertex_job

    policy = policy or RetryPolicy.from_env()
    payload = json.loads(json.dumps(payload))
    validated_job(payload)  # a malformed payload fails before any call
    spec = payload.setdefault("job_spec", {})
    pipeline_job = _resolved(pipeline_job)
    try:
        _inherit_pipeline_settings(pipeline_client, pipeline_job, spec, policy, echo)
    except Exception as exc:
        raise GaveUp(f"could not read the pipeline job's service account and network "
                     f"({describe_error(exc)}); no CustomJob was created") from exc
    key = launch_key(pipeline_job, task_name)
    payload.setdefault("labels", {})[LAUNCH_LABEL] = key
    tracking = open_remote_training(f"{LAUNCH_LABEL}={key}", "vertex-customjob", task_name,
                                    log=echo)
    chief_env(payload, tracking.env())
    job = validated_job(payload)
    pools = " + ".join(f"{p.replica_count} x {p.machine_spec.machine_type}"
                       for p in job.job_spec.worker_pool_specs)
    echo(f"CustomJob {job.display_name}: {pools}, {job.job_spec.scheduling.strategy.name}; "
         f"label {LAUNCH_LABEL}={key}")
    remote = VertexJob(job_client, KIND, f"projects/{project}/locations/{location}", job,
                       (LAUNCH_LABEL, key), poll_s=poll_s, sleep=policy.sleep)
    try:
        finished = follow_vertex_job(remote, policy, echo, gcp_resources_path,
                                     deadline_s=deadline_s)
    except BaseException:
        tracking.end(succeeded=False)
        raise
    tracking.end(succeeded=True)
    return finished


def chief_env(payload: dict, env: dict[str, str]) -> None:
    """Add ``env`` to the chief's container (worker pool 0, one replica) only: the other
    pools' replicas never see the MLflow run the chief logs training into."""
    if not env:
        return
    container = payload["job_spec"]["worker_pool_specs"][0].setdefault("container_spec", {})
    kept = [e for e in container.get("env", []) if e.get("name") not in env]
    container["env"] = kept + [{"name": k, "value": v} for k, v in sorted(env.items())]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gkeflow-vertex-launcher", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--payload", required=True,
                        help="the CustomJob as JSON (aiplatform_v1.CustomJob fields)")
    parser.add_argument("--project", required=True, help="Google Cloud project id")
    parser.add_argument("--location", required=True, help="Vertex AI region, e.g. us-central1")
    parser.add_argument("--pipeline_job", default="",
                        help="the PipelineJob resource name: keys the job's label and "
                             "lends its service account and network")
    parser.add_argument("--task_name", default="train-model",
                        help="the pipeline task; part of the job's label")
    parser.add_argument("--gcp_resources", default="",
                        help="file to write the gcp_resources document naming the job to")
    parser.add_argument("--api_endpoint", default="", help="Override (tests, private endpoints).")
    parser.add_argument("--poll", type=float, default=20.0,
                        help="seconds between two status reads (default: 20)")
    # the pipeline run's id and name, compiled in with MLflow tracking (read by the tracker)
    for name in (ARG_RUN_ID, ARG_RUN_NAME):
        parser.add_argument(name, default="", help=argparse.SUPPRESS)
    options.add_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def body():
        policy = options.policy_from_args(args)
        job_client, pipeline_client = clients(args.location, args.api_endpoint)
        run_custom_job(job_client, pipeline_client, args.project, args.location,
                       json.loads(args.payload), args.pipeline_job, args.task_name,
                       args.gcp_resources, poll_s=args.poll,
                       echo=lambda line: print(line, flush=True), policy=policy)

    from gkeflow.components.cloud.follow import run_cli

    return run_cli(body, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
