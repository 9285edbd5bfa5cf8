"""A Vertex AI pipeline run adding itself to its Vertex AI experiment, from its exit task.

``gkeflow submit`` adds the runs it creates (as ``PipelineJob.submit(experiment=...)``
does), but the runs a Vertex AI schedule creates carry no experiment: the service creates
them from ``CreatePipelineJobRequest``, which has no such field. So the run does it itself
when it ends: it reads its own job (``status.pipeline_job_resource_name``) for the
``system.PipelineRun`` context Vertex AI made as the run started, gets or creates the
experiment, and adds the context to the experiment's children (``AddContextChildren``;
the service skips a child the experiment has already, so a submitted run added twice, or
a retried exit task, is in the experiment once). The task's credentials are the runs'
service account's (it needs ``roles/aiplatform.user``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from gkeflow.components.tracking import vertex_run
from gkeflow.components.tracking.client import one_line


def add_to_experiment(job_name: str, environ: dict[str, str] | None = None,
                      log: Callable[[str], None] = print) -> bool:
    """Add pipeline job ``job_name``'s run context to ``GKEFLOW_VERTEX_EXPERIMENT``; False,
    after one line, when it could not be done (never raises)."""
    env = os.environ if environ is None else environ
    experiment = env.get(vertex_run.ENV_EXPERIMENT, "")
    if not experiment:
        return False
    if not job_name or job_name.startswith("{{$"):
        log(f"vertex experiments: the run does not know its pipeline job; not added to "
            f"experiment {experiment!r}")
        return False
    try:
        parent, call = vertex_run.session(env)
        added = vertex_run.within(vertex_run.DEADLINE_S,
                                  lambda: _add(job_name, experiment, parent, call),
                                  f"adding {job_name} to experiment {experiment!r}")
    except Exception as exc:  # best effort: the run's outcome stands
        log(f"vertex experiments: run not added to experiment {experiment!r} "
            f"({one_line(exc)}); the run's outcome is unchanged")
        return False
    if added:
        log(f"vertex experiments: run in experiment {experiment!r}")
    else:
        log(f"vertex experiments: Vertex AI made no run context for {job_name}; not added "
            f"to experiment {experiment!r}")
    return added


def _add(job_name: str, experiment: str, parent: str, call) -> bool:
    from google.cloud import aiplatform
    from google.cloud.aiplatform import initializer, utils

    rpc = {"timeout": vertex_run.CALL_TIMEOUT_S, "retry": None}
    pipelines = initializer.global_config.create_client(
        client_class=utils.PipelineClientWithOverride).select_version("v1")
    metadata = initializer.global_config.create_client(
        client_class=utils.MetadataClientWithOverride).select_version("v1")
    job = call(f"read pipeline job {job_name.rsplit('/', 1)[-1]}",
               lambda: pipelines.get_pipeline_job(name=job_name, **rpc))
    run_context = job.job_detail.pipeline_run_context.name
    if not run_context:
        return False
    call(f"look up or create experiment {experiment!r}",
         lambda: aiplatform.Experiment.get_or_create(experiment))
    call(f"add the run to experiment {experiment!r}",
         lambda: metadata.add_context_children(
             context=f"{parent}/metadataStores/default/contexts/{experiment}",
             child_contexts=[run_context], **rpc))
    return True
