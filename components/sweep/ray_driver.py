"""The RayJob's entrypoint: the sweep's trials under Ray Tune on the KubeRay cluster.

KubeRay submits it to the cluster's head (``spec.entrypoint``); it joins the cluster
(``ray.init(address="auto")``), runs the trials (:func:`.ray_tune.run_tune`: each on a
worker, reading the prepared splits from ``gs://``, checkpointing and publishing under the
output URI), and publishes every trial's report under ``<output>/sweep`` with its
completion marker written last. The launcher step (:mod:`.rayjob_launcher`) reads that;
a sweep whose marker is there is never run again.

    python -m gkeflow.components.sweep.ray_driver --dataset gs://... --schema gs://... \\
        --output gs://... --trials '[...]' --fixed '{...}' --settings '{...}'
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from gkeflow.components.sweep.ray_settings import sweep_uri


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gkeflow-ray-driver",
        description="Run a gkeflow sweep's trials under Ray Tune on the Ray cluster this "
                    "runs in, and publish their reports under --output.")
    parser.add_argument("--dataset", required=True, help="prepared splits (gs:// or a path)")
    parser.add_argument("--schema", required=True, help="the schema prepare_data wrote")
    parser.add_argument("--output", required=True,
                        help="where trials publish their models and reports (gs://)")
    parser.add_argument("--trials", required=True, help="JSON list: one dict per trial")
    parser.add_argument("--fixed", required=True, help="JSON: the hyperparameters not searched")
    parser.add_argument("--settings", required=True, help="JSON: TuneSettings fields")
    parser.add_argument("--space", default="{}",
                        help="JSON: the search space (sweep.parameters), for bayesian search")
    parser.add_argument("--tracking", default="{}",
                        help="JSON: the MLflow server and parent run the trials log under")
    parser.add_argument("--address", default="auto",
                        help="the Ray cluster to join; empty starts a local instance")
    return parser.parse_args(argv)


def run_sweep(dataset: str, schema: str, output: str, trials: list[dict], fixed: dict,
              settings: dict, address: str = "auto", echo=print,
              tracking: dict | None = None,
              space: dict | None = None) -> tuple[list[dict], list[str]]:
    """Run the sweep unless it is published already; returns the trials that ran and
    their reports, published under ``<output>/sweep`` with the marker written last."""
    from gkeflow.components.scaleout import storage
    from gkeflow.components.sweep.ray_settings import TuneSettings
    from gkeflow.components.sweep.ray_tune import run_tune

    where = sweep_uri(output)
    published = storage.published_summary(where)
    if published is not None:
        echo(f"the sweep's reports are already published at {where}; nothing to run")
        return list(published["trials"]), list(published["reports"])
    ran, reports = run_tune(dataset, schema, trials, fixed, TuneSettings(**settings), output,
                            echo=echo, address=address, tracking=tracking, space=space)
    with tempfile.TemporaryDirectory(prefix="gkeflow-sweep-") as scratch:
        storage.publish(Path(scratch), where, {"trials": ran, "reports": reports})
    echo(f"published {len(reports)} trial reports at {where}")
    return ran, reports


def run(args: argparse.Namespace, echo=print) -> tuple[list[dict], list[str]]:
    """:func:`run_sweep` with the command line's arguments."""
    return run_sweep(args.dataset, args.schema, args.output, json.loads(args.trials),
                     json.loads(args.fixed), json.loads(args.settings), args.address, echo,
                     json.loads(args.tracking), json.loads(args.space) or None)


def main(argv: list[str] | None = None) -> int:
    from gkeflow.components.cloud.follow import run_cli

    args = parse_args(sys.argv[1:] if argv is None else argv)
    return run_cli(lambda: run(args, echo=lambda line: print(line, flush=True)))


if __name__ == "__main__":
    raise SystemExit(main())
