"""The local stand-in: `gkeflow deploy local NAME` answers TensorFlow Serving REST requests
with a locally deployed model, and `gkeflow run --deploy` prints how to ask it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gkeflow.pipelines.cli.deploy_context import DEFAULT_OUTPUT, echo_err
from gkeflow.pipelines.cli.params import NonEmptyPath


@click.command("local")
@click.argument("name")
@click.option("--output", type=NonEmptyPath(file_okay=False, path_type=Path),
              default=DEFAULT_OUTPUT, show_default=True,
              help="The --output directory of `gkeflow run --deploy`.")
@click.option("--request", "request_file", type=click.Path(exists=True, dir_okay=False,
                                                           path_type=Path),
              help='A JSON request, {"instances": [{"<input>": value, ...}, ...]}: print the '
                   "answer and the predicted classes.")
@click.option("--version", "version", type=int,
              help="Ask this version (default: the one with the largest share).")
@click.option("--serve", is_flag=True,
              help="Serve POST /v1/models/NAME:predict on 127.0.0.1 until Ctrl-C.")
@click.option("--port", type=click.IntRange(0, 65535), default=8501, show_default=True,
              help="--serve: the port (TensorFlow Serving's REST port is 8501).")
def local_command(name, output, request_file, version, serve, port) -> None:
    """Answer TensorFlow Serving REST requests with the locally deployed NAME."""
    from gkeflow.components.deploy.local_server import (
        Answerer,
        LocalDeployError,
        LocalEndpoints,
        make_server,
    )
    from gkeflow.components.deploy.servable import NotServable, RequestError
    from gkeflow.pipelines.cli.quiet import native_stderr_silenced

    if not request_file and not serve:
        raise click.UsageError("give --request FILE or --serve")
    endpoints = LocalEndpoints(Path(output) / "deployments")
    endpoint = endpoints.get(name)
    if endpoint is None:
        known = ", ".join(e.name for e in endpoints.list()) or "none"
        raise click.ClickException(f"no local endpoint {name} under {output}/deployments "
                                   f"(endpoints: {known}); run `gkeflow run --deploy` first")
    if request_file:
        try:
            body = json.loads(request_file.read_text(encoding="utf-8"))
            with native_stderr_silenced():
                answerer = Answerer(endpoint)
                answer = answerer.predict(body, version)
        except ValueError as exc:
            raise click.ClickException(f"{request_file}: {exc}") from exc
        except (RequestError, NotServable, LocalDeployError, KeyError) as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(json.dumps(answer))
    if serve:
        try:
            with native_stderr_silenced():
                server = make_server(endpoint, port, log=echo_err)
        except OSError as exc:
            raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {exc}") from exc
        host, bound = server.server_address[:2]
        click.echo(f"serving {name} ({endpoint.describe()}) at "
                   f"http://{host}:{bound}/v1/models/{name}:predict — Ctrl-C stops")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


def print_local_deployment(console, result, output: Path) -> None:
    """After a local run: the deployment, and a request file built from the evaluation's
    rows (with the classes the evaluation predicted for them) to try it with."""
    deployed = result.parameter_outputs("deploy-model")
    if not deployed:
        return
    from gkeflow.components.deploy.logic import load_sample
    from gkeflow.components.deploy.servable import ServingContract

    name = Path(str(deployed.get("endpoint", ""))).stem
    console.print(f"Deployed:  {name} (local stand-in): {deployed.get('traffic_split')}",
                  markup=False)
    from gkeflow.components.deploy.local_server import LocalEndpoints

    evaluation = result.output_dir("evaluate-model", "evaluation")
    endpoint = LocalEndpoints(Path(output) / "deployments").get(name)
    sample = load_sample(Path(evaluation)) if evaluation else None
    if not sample or endpoint is None:
        return
    contract = ServingContract.of(Path(endpoint.stable().model_dir))
    request = Path(output) / "requests" / f"{name}.json"
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text(json.dumps({"instances": contract.instances(sample["rows"][:5])},
                                  indent=2), encoding="utf-8")
    expected = request.with_name(f"{name}.expected.json")
    # a classifier's classes, or a regressor's values (one per row, no classes)
    predicted = sample["classes"][:5] or [f"{row[0]:.6g}" for row in
                                          sample["probabilities"][:5]]
    expected.write_text(json.dumps({"classes": sample["classes"][:5]} if sample["classes"]
                                   else {"values": [row[0] for row in
                                                    sample["probabilities"][:5]]}),
                        encoding="utf-8")
    console.print(f"Try:       gkeflow deploy local {name} --output {output} --request "
                  f"{request}", markup=False)
    console.print(f"           (the evaluation predicted {', '.join(predicted)}); "
                  f"--serve answers POST /v1/models/{name}:predict on 127.0.0.1",
                  markup=False)
