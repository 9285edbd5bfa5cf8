"""`gkeflow plan`: what each step of a pipeline requests on a target."""

from __future__ import annotations

from pathlib import Path

import click

from gkeflow.pipelines.cli.common import (
    compute_from_options,
    compute_options,
    read_config,
)
from gkeflow.pipelines.cli.tables import (
    PLAN_COLUMNS,
    PLAN_WIDE_COLUMNS,
    format_options,
    plan_json,
    plan_records,
    print_json,
    print_table,
)
from gkeflow.pipelines.settings.platforms import platform
from gkeflow.pipelines.targets.compile import compile_choices


@click.command("plan")
@click.argument("pipeline", default="training")
@click.option("--pipeline", "pipeline_option", metavar="NAME",
              help="The pipeline (same as the PIPELINE argument).")
@click.option("--target", type=click.Choice(compile_choices()), default="gke",
              show_default=True,
              help="Backend whose requests to show (gke means GKE Autopilot when "
                   "targets.gke.autopilot is true in gkeflow.yaml); autopilot: GKE Autopilot.")
@click.option("--region", metavar="REGION",
              help="Region whose list prices the cost columns use. Default: the vertex "
                   "target's region in gkeflow.yaml, else us-central1.")
@click.option("--history", type=click.IntRange(min=0), default=0, metavar="N",
              help="Read the newest N runs of the pipeline on the target and add each "
                   "step's expected cost at their median duration.")
@click.option("--sources", "show_sources", is_flag=True,
              help="List the full source (page, catalogue file and commit, or SKUs) of every "
                   "price the cost lines name by a short reference.")
@compute_options
@format_options("--output", "--format")
def plan_command(pipeline: str, pipeline_option: str | None, target: str,
                 config_path: Path | None, compute_overrides: tuple[str, ...],
                 wide: bool = False, output_format: str = "table", region: str | None = None,
                 history: int = 0, show_sources: bool = False) -> None:
    """Show what each step of PIPELINE (default: training) will request on a target.

    One row per step: CPU, memory, accelerator (as the target spells it), GPUs per node,
    capacity (on-demand, spot, flex-start or reservation), total GPUs, timeout and the
    machine shape that hosts it; --wide adds image, nodes, Kueue queue, ephemeral disk,
    retries, caching and /dev/shm. The table fits COLUMNS (or the terminal);
    --output json prints every field for scripts. Cost columns: each step's hourly list
    price on that target and capacity (a rate derived from other prices is marked an
    estimate, its rule below the table) and its ceiling at its timeout, with the run's total
    and its verdict against budget.default of gkeflow.yaml (docs/costs.md).
    The compute is validated exactly as `gkeflow compile` does; requests the target
    cannot honour are listed below the table.
    """
    from click.core import ParameterSource

    from gkeflow.components.images import ImageLockError, is_pinned, pin, pull_size_note
    from gkeflow.pipelines.compute.plan import plan, target_notes
    from gkeflow.pipelines.compute.profiles import ComputeError
    from gkeflow.pipelines.settings.images_config import image_map
    from gkeflow.pipelines.targets.compile import PIPELINES

    named = click.get_current_context().get_parameter_source("pipeline")
    if pipeline_option and named == ParameterSource.COMMANDLINE and pipeline_option != pipeline:
        raise click.UsageError(f"PIPELINE {pipeline} and --pipeline {pipeline_option} differ; "
                               "name the pipeline once")
    pipeline = pipeline_option or pipeline
    if pipeline not in PIPELINES:
        from gkeflow.components.did_you_mean import did_you_mean

        raise click.BadParameter(f"unknown pipeline {pipeline!r}"
                                 f"{did_you_mean(pipeline, PIPELINES)}; available: "
                                 f"{', '.join(PIPELINES)}", param_hint="PIPELINE")
    config = read_config(config_path)
    target = config.platform_of(target)
    if pipeline == "prediction":
        from gkeflow.pipelines.definitions.prediction import resolve_compute, step_images
    elif pipeline == "fanout-prepare":
        from gkeflow.pipelines.definitions.fanout import resolve_compute, step_images
    elif pipeline == "sweep":
        from gkeflow.pipelines.cli.sweep import resolve_sweep
        from gkeflow.pipelines.definitions.sweep import resolve_sweep_compute, step_images

        sweep = resolve_sweep(config_path)

        def resolve_compute(target, compute):
            return resolve_sweep_compute(target, compute, sweep.engine, config.preparation,
                                         sweep)
    else:
        from gkeflow.pipelines.definitions.training import resolve_compute as training_compute
        from gkeflow.pipelines.definitions.training import step_images

        def resolve_compute(target, compute):
            return training_compute(target, compute, config.preparation,
                                    config.training_families())

    from gkeflow.pipelines.targets.compile import pipeline_compute

    compute = pipeline_compute(pipeline, compute_from_options(config_path, compute_overrides))
    try:
        profiles = resolve_compute(target, compute)
        lock = image_map(config.images)
        if pipeline == "prediction":
            images = step_images(target, profiles)
        elif pipeline == "fanout-prepare":
            images = step_images()
        else:  # training and sweep: a TPU training step (or trial) runs in the TPU image
            images = step_images(profiles)
    except (ComputeError, ImageLockError) as exc:
        raise click.ClickException(str(exc)) from exc
    images = {step: pin(images[step], lock) for step in profiles if step in images}
    rows = plan(profiles, target, {step: image.rsplit("/", 1)[-1]
                                   for step, image in images.items()})
    from gkeflow.pipelines.cli.costs import plan_cost

    cost, history_runs = plan_cost(config, target, pipeline, profiles, region, history)
    verdict_line, verdict = plan_verdict(config, cost)
    mounts, custom_jobs = _gcsfuse_mounts(pipeline, target, config, profiles)
    lustre = _lustre_mounts(target, config, profiles, mounted_by_job=bool(custom_jobs) or (
        platform(target).kubernetes and pipeline == "training"
        and profiles["train-model"].replicas > 1))
    if output_format == "json":
        print_json({**plan_json(pipeline, target, rows, images, target_notes(
            profiles, target, () if pipeline == "sweep" else None)),
            "cost": {**cost.as_json(), "history_runs": history_runs, "budget": verdict},
            "gcsfuse": {step: [m.as_json() for m in found] for step, found in mounts.items()},
            "lustre": {step: [m.as_json() for m in found] for step, found in lustre.items()}})
        return
    caption = ("CPU and memory: request = limit" if platform(target).kubernetes
               else "CPU and memory: limits; Vertex AI picks the machine")
    if platform(target).kubernetes and not wide:
        caption += "; accelerator: node label, requested as nvidia.com/gpu"
        if any(p.uses_tpu for p in profiles.values()):
            caption += " (TPUs: google.com/tpu, chips per host)"
    from gkeflow.pipelines.cli.costs import cost_cells, cost_lines

    cells = cost_cells(cost)
    records = [{**record, **cells[record["step"]]} for record in plan_records(rows, wide)]
    more = ("expected",) if history else ()
    console = print_table(records, PLAN_COLUMNS + more, PLAN_WIDE_COLUMNS + more, wide,
                          title=f"{pipeline} on {target}", caption=caption, no_wrap=("step",))
    for line in cost_lines(cost, history_runs if history else 0, sources=show_sources):
        console.print(line, markup=False)
    if verdict_line:
        console.print(verdict_line, markup=False)
    for image in sorted(set(images.values())):
        pinned = ("pinned" if is_pinned(image)
                  else "tag only, not built: run `gkeflow images build`")
        steps = ", ".join(step for step, named in images.items() if named == image)
        console.print(f"image {image} ({pinned}; {pull_size_note(image)}): {steps}",
                      markup=False)
    notes = target_notes(profiles, target, () if pipeline == "sweep" else None)
    if pipeline == "sweep":
        from gkeflow.pipelines.definitions.sweep_trials import TRIAL_STEP, trial_note

        if compute and TRIAL_STEP in compute:
            notes.append(trial_note(target, sweep.engine, compute[TRIAL_STEP]))
    elif pipeline == "training" and "train-model" in profiles:
        notes.append(candidates_note(profiles))
    for note in filter(None, notes):
        console.print(f"note: {note}", markup=False)
    for line in _workspace_lines(pipeline, target, config, config_path, profiles):
        console.print(line, markup=False)
    from gkeflow.pipelines.compute.gcsfuse import plan_lines as gcsfuse_lines

    for line in gcsfuse_lines(mounts, target, custom_jobs):
        console.print(line, markup=False)
    from gkeflow.pipelines.compute.lustre import plan_lines as lustre_lines

    for line in lustre_lines(lustre):
        console.print(line, markup=False)
    if platform(target).kubernetes:
        from gkeflow.pipelines.targets.backend_version import plan_line

        console.print(plan_line(pipeline, compute, config), markup=False)
    from gkeflow.pipelines.settings.tracking_config import plan_lines as tracking_lines

    for line in tracking_lines(config.tracking, target):
        console.print(line, markup=False)
    if pipeline == "sweep":
        from gkeflow.pipelines.cli.sweep import plan_lines

        for line in plan_lines(sweep, profiles, target):
            console.print(line, markup=False)


def _gcsfuse_mounts(pipeline: str, target: str, config,
                    profiles: dict) -> tuple[dict, tuple[str, ...]]:
    """Each step's gcsfuse mounts as compile builds them, and the steps whose mounts are in
    a Vertex AI CustomJob (or tuning job) rather than the step's own pod."""
    from gkeflow.pipelines.compute.engines import engine_for, training_steps
    from gkeflow.pipelines.compute.gcsfuse import check_engine, plan_mounts

    launched: tuple[str, ...] = ()
    if pipeline == "training":
        launched = tuple(step for step in training_steps(profiles)
                         if engine_for(target, profiles, step) is not None)
        if problem := check_engine(config.gcsfuse, target, bool(launched)):
            raise click.ClickException(problem)
    elif pipeline == "sweep" and "tune-with-vizier" in profiles:
        launched = ("tune-with-vizier",)  # the trials are the tuning job's custom jobs
    on_gke = platform(target).kubernetes and bool(launched)
    mounts = plan_mounts(config.gcsfuse, profiles, target,
                         unmounted=launched if on_gke else ())
    jobs = launched if platform(target).managed else ()
    return mounts, jobs


def _lustre_mounts(target: str, config, profiles: dict, mounted_by_job: bool) -> dict:
    """Each step's Managed Lustre mounts as compile builds them; what compile refuses
    (Vertex AI, JobSet training with shards or checkpoints there) in one line."""
    from gkeflow.pipelines.compute import lustre

    problem = (lustre.check_target(config.lustre, target)
               or lustre.check_engine(config.lustre, target, mounted_by_job))
    if problem:
        raise click.ClickException(problem)
    return lustre.plan_mounts(config.lustre, profiles, target,
                              unmounted=("train-model",) if mounted_by_job else ())


def _workspace_lines(pipeline: str, target: str, config, config_path: Path | None,
                     profiles: dict) -> list[str]:
    """What `gkeflow plan` says of the run's workspace (GKE, roots other than gs://)."""
    from gkeflow.pipelines.compute.workspace import parallel_note

    if pipeline not in ("training", "sweep") or not platform(target).kubernetes:
        return []
    from gkeflow.pipelines.compute.workspace import PipelineStorage

    settings = config.gke_workspace()
    jobset = pipeline == "training" and profiles["train-model"].replicas > 1
    try:
        PipelineStorage("gke", settings, jobset=jobset)  # what compile would refuse
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if not settings.active("gke") or jobset:
        return ["workspace: none (shards and checkpoints under the gs:// pipeline root)"]
    preparation = config.preparation
    writers = "plan-prepare, prepare-group" if preparation.fanout else "prepare-data"
    parameters = (config.parameters or {}).get("default", {})
    elsewhere = {what: str(parameters.get(name, "")) for what, name in (
        ("prepared shards", "shard_root"), ("checkpoints", "checkpoint_uri"))}
    kept = [what for what, uri in elsewhere.items() if not uri] or ["nothing gkeflow writes"]
    lines = [f"workspace: {settings.size} {settings.storage_class} ({settings.access_mode}) "
             f"at /kfp-workspace in {writers}, train-model, evaluate-model: "
             f"{' and '.join(kept)}; deleted when the run succeeds"]
    lines += [f"{what}: {uri} (parameters.default)" for what, uri in elsewhere.items() if uri]
    notes = []
    if preparation.fanout:
        notes.append(parallel_note(settings, "fan-out groups", preparation.parallelism))
    if pipeline == "sweep":
        from gkeflow.pipelines.cli.sweep import resolve_sweep

        notes.append(parallel_note(settings, "sweep trials",
                                   resolve_sweep(config_path).parallel_trials))
    return lines + [f"note: {note}" for note in notes if note]


def plan_verdict(config, cost) -> tuple[str, dict | None]:
    """The run's ceiling against ``budget.default`` (the budget `submit` holds a default
    run to): a line for the table and its JSON; ('', None) without that budget."""
    from gkeflow.pipelines.cli.costs import budget_verdict
    from gkeflow.pipelines.settings.budget_config import DEFAULT_ENVIRONMENT, budget_for

    budget, where = budget_for(config, DEFAULT_ENVIRONMENT)
    if budget is None or budget.max_run_usd is None:
        return "", None
    return budget_verdict(cost, budget.max_run_usd, where)


def candidates_note(profiles) -> str:
    """What ``model_type: auto`` (the default) trains, and where."""
    from gkeflow.pipelines.compute.engines import training_steps

    steps = [step for step in training_steps(profiles) if step != "train-model"]
    if steps:
        return (f"model_type auto (the default): the candidates train side by side "
                f"({', '.join(steps)}), each on its own compute; train-model keeps the best on "
                "the eval split (or their ensemble); candidates: in gkeflow.yaml chooses them, "
                "--param model_type=mlp|wide_deep|gbdt|linear trains one")
    profile = profiles["train-model"]
    if profile.uses_tpu or profile.replicas > 1:
        where = "a TPU" if profile.uses_tpu else f"{profile.replicas} workers"
        return (f"train-model: model_type auto trains the Keras MLP alone on {where} "
                "(gradient-boosted trees and the linear model train on one CPU or GPU "
                "machine)")
    return ""
