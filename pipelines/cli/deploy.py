"""`gkeflow deploy`: serve a registered model version on Vertex AI, GKE (KServe) or the local
stand-in, with canary traffic, promotion and rollback; `gkeflow deploy local` answers
TensorFlow Serving REST requests on loopback.

Connection settings come from gkeflow.yaml: ``targets.vertex`` (project, region,
api_endpoint) for Vertex AI, the kubeconfig (or the pod's service account) for GKE,
``deploy.<env>`` for the endpoint's settings and ``compute.deploy-model`` for the serving
machines; locally, the ``--output`` directory of `gkeflow run`.

The commands live in sibling modules: deploy_model (deploy NAME), deploy_endpoints (promote,
rollback, status), deploy_local (local); deploy_context holds what they share.
"""

from __future__ import annotations

import click

from gkeflow.pipelines.cli.deploy_endpoints import promote_command, rollback_command, status_command
from gkeflow.pipelines.cli.deploy_local import local_command
from gkeflow.pipelines.cli.deploy_model import deploy_model_command


class DeployGroup(click.Group):
    """``gkeflow deploy NAME@VERSION ...`` runs the hidden ``model`` command; the other
    words are subcommands (promote, rollback, status, local)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["model", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx, formatter):
        formatter.write_usage("gkeflow deploy", "NAME[@VERSION|@ALIAS] --target T [--traffic N] "
                              "[--dry-run] | promote|rollback|status|local NAME ...")

    def format_options(self, ctx, formatter):
        """The group's options, then those of ``gkeflow deploy NAME``: the command most
        calls run, which has no name of its own to ask --help of."""
        super().format_options(ctx, formatter)
        deploy = self.commands["model"]
        records = [record for param in deploy.get_params(ctx)
                   if isinstance(param, click.Option) and not param.hidden
                   and (record := param.get_help_record(ctx)) is not None
                   and not record[0].startswith("-h")]
        with formatter.section("Options of gkeflow deploy NAME[@VERSION|@ALIAS]"):
            formatter.write_dl(records)


@click.group(cls=DeployGroup)
def deploy_group() -> None:
    """Serve a registered model: canary traffic, promotion, rollback, status.

    \b
      gkeflow deploy penguins-classifier@3 --target vertex --traffic 10
      gkeflow deploy penguins-classifier@champion --target gke --dry-run
      gkeflow deploy promote penguins-classifier --target vertex   # 100%, keep 1 previous
      gkeflow deploy rollback penguins-classifier --target vertex  # the split before
      gkeflow deploy status penguins-classifier --target gke
      gkeflow deploy local penguins-classifier --request request.json
      gkeflow deploy local penguins-classifier --serve --port 8501

    A model is checked before anything changes: its serving_default signature answers
    through TensorFlow Serving's REST mapping ({"instances": [{input: value}, ...]}), with
    the inputs and dtypes it was trained with.
    """


for _command in (deploy_model_command, promote_command, rollback_command, status_command,
                 local_command):
    deploy_group.add_command(_command)
