"""The ``gkeflow`` command group: it assembles the commands, each in its own module of
:mod:`gkeflow.pipelines.cli`, and holds only the group's own options."""

from __future__ import annotations

import click

from gkeflow.pipelines.cli.compile import compile_command
from gkeflow.pipelines.cli.deploy import deploy_group
from gkeflow.pipelines.cli.docs import docs_command
from gkeflow.pipelines.cli.errors import ErrorReportingGroup
from gkeflow.pipelines.cli.images import images_group
from gkeflow.pipelines.cli.models import models
from gkeflow.pipelines.cli.monitoring import monitoring_group
from gkeflow.pipelines.cli.plan import plan_command
from gkeflow.pipelines.cli.prices import prices_group
from gkeflow.pipelines.cli.run import run
from gkeflow.pipelines.cli.runs import runs_group
from gkeflow.pipelines.cli.ship import init_command, schedule_group, submit_command


@click.group(cls=ErrorReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gkeflow")
@click.option("--debug", is_flag=True,
              help="Show the traceback of a failure (also GKEFLOW_DEBUG=1).")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """gkeflow: Kubeflow Pipelines components and pipelines for TensorFlow on GKE and Vertex AI.

    \b
    Common tasks:
      gkeflow run                      train on the bundled penguins data, locally
      gkeflow run --data my.csv --label target
      gkeflow run --pipeline prediction --data new.csv   score rows with the champion
      gkeflow compile                  write compiled/training.{gke,vertex}.yaml
                                       and compiled/components/<component>.yaml
      gkeflow plan --target vertex     what each step requests on Vertex AI
      gkeflow models list              models in the local registry
      gkeflow deploy NAME@3 --target vertex   serve a version (canary, promote, rollback)
      gkeflow init                     write an example gkeflow.yaml
      gkeflow images build             build the images into images.registry (gkeflow.yaml)
      gkeflow submit --target vertex   run the pipeline on Vertex AI (or --target gke)
      gkeflow schedule apply           create/update the schedules of gkeflow.yaml
      gkeflow runs list                past runs on the targets: state, failed step, link
      gkeflow monitoring apply         alert policies on idle GPUs (Cloud Monitoring)
      gkeflow prices list              hourly prices with source, date and STALE marks

    A failure prints one line saying what to fix and exits non-zero; `gkeflow --debug
    COMMAND` shows the traceback.
    """
    ctx.obj = {"debug": debug}
    import os

    # MLflow's own "View run ... at URL" lines would interleave with gkeflow's; gkeflow
    # prints the run's link itself. Steps started from here inherit the setting.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")



for _command in (run, compile_command, docs_command, plan_command, models, init_command,
                 submit_command, schedule_group, images_group, runs_group, monitoring_group,
                 prices_group):
    main.add_command(_command)
main.add_command(deploy_group, "deploy")


if __name__ == "__main__":
    main()
