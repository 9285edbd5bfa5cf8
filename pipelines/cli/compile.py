"""`gkeflow compile`: the pipelines as YAML for Kubeflow Pipelines on GKE and Vertex AI."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gkeflow.pipelines.cli.common import (
    compute_from_options,
    compute_options,
    read_config,
    stdout_console,
)
from gkeflow.pipelines.cli.params import NonEmptyPath
from gkeflow.pipelines.targets.compile import (
    COMPILE_TARGETS,
    DEFAULT_OUTPUT,
    compile_choices,
)


def _with_notifications(config, environment: str):
    """``config`` carrying ``notifications.<environment>`` for compiling (none when the
    file has none for it); an environment gkeflow.yaml does not know is refused."""
    from gkeflow.pipelines.definitions.operations import select

    known = {"default", *config.parameters, *config.notifications}
    if environment not in known:
        raise click.BadParameter(f"{environment!r} is not an environment of gkeflow.yaml "
                                 f"(environments: {', '.join(sorted(known))})",
                                 param_hint="--env")
    return select(config, environment)


@click.command("compile")
@click.option("--target", type=click.Choice([*compile_choices(), "all"]), default="all",
              show_default=True,
              help="Backend to compile for (all: gke and vertex). gke compiles for GKE "
                   "Autopilot when targets.gke.autopilot is true; autopilot names it directly "
                   "(compiled/<pipeline>.autopilot.yaml).")
@click.option("--output", type=NonEmptyPath(file_okay=False, path_type=Path),
              default=DEFAULT_OUTPUT, show_default=True,
              help="Directory for the YAML files (relative to the current directory).")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 naming the files that differ from what the code "
                   "produces now.")
@click.option("--release", is_flag=True,
              help="Refuse to compile when any step's image is referenced by tag only "
                   "(not built: no digest in the images lock file).")
@click.option("--env", "environment", default="default", show_default=True,
              help="Whose notifications and tracking (notifications.<env>, tracking.<env> of "
                   "gkeflow.yaml) the pipelines carry, as `submit --env` compiles them; "
                   "retention is always compiled in. Parameters keep the pipelines' defaults "
                   "(registry_uri: the MLflow Model Registry when tracking.<env>.mlflow has a "
                   "tracking_uri).")
@compute_options
def compile_command(target: str, output: Path, check: bool, release: bool, environment: str,
                    config_path: Path | None, compute_overrides: tuple[str, ...]) -> None:
    """Compile the pipelines to YAML for Kubeflow Pipelines on GKE and/or Vertex AI Pipelines.

    Writes <pipeline>.<target>.yaml: the GKE file carries kfp-kubernetes settings
    (node selectors, tolerations); the Vertex file is a single document with NVIDIA_*
    accelerator types. Each step's compute (defaults, gkeflow.yaml, --compute) is
    validated for the target first; every image is mapped to the registry of the
    `images:` section and pinned to the digest `gkeflow images build` recorded in the
    lock file (gkeflow.lock). `gkeflow plan` shows what each step will request.
    The pipelines carry notifications.<--env> and retention: (docs/operating.md), with
    only the names of the secrets holding a webhook URL, and tracking.<--env>
    (docs/tracking.md), with only the names of the secrets holding MLflow credentials.
    """
    from gkeflow.components.images import ImageLockError
    from gkeflow.pipelines.compute.plan import target_notes
    from gkeflow.pipelines.compute.profiles import ComputeError
    from gkeflow.pipelines.settings.config import ConfigError
    from gkeflow.pipelines.settings.images_config import image_map
    from gkeflow.pipelines.targets.compile import ReleaseError, compile_all, stale_files
    from gkeflow.pipelines.targets.component_yaml import compile_components, stale_component_files

    targets = COMPILE_TARGETS if target == "all" else (target,)
    console = stdout_console()
    compute = compute_from_options(config_path, compute_overrides)
    config = _with_notifications(read_config(config_path), environment)
    try:
        images = image_map(config.images)
        if check:
            stale = (stale_files(output, targets, compute=compute, lock=images, config=config)
                     + stale_component_files(output, images))
            if stale:
                for path in stale:
                    console.print(f"stale: {path}", markup=False)
                console.print("Run `gkeflow compile` and commit the result.")
                sys.exit(1)
            console.print(f"compiled pipelines in {output} are up to date", markup=False)
            return
        paths = compile_all(output, targets, compute=compute, lock=images, release=release,
                            config=config)
        paths += compile_components(output, images, release=release)
    except (ComputeError, ReleaseError, ImageLockError) as exc:
        raise click.ClickException(str(exc)) from exc
    except ConfigError as exc:  # notifications a target cannot send
        raise click.ClickException(f"--env {environment}: {exc}, or compile for the other "
                                   "target alone (--target)") from exc
    for path in paths:
        console.print(f"wrote {path}", markup=False)
    for path, reason in paths.skipped.items():
        removed = " (removed the one an earlier compile wrote)" if path in paths.removed else ""
        console.print(f"note: {path} not written{removed}: {reason}", markup=False)
    from gkeflow.components.images import is_pinned

    written = [Path(path).read_text(encoding="utf-8") for path in paths]
    tag_only = sorted(image for image in set(images.values())
                      if not is_pinned(image) and any(image in text for text in written))
    if tag_only:
        from gkeflow.pipelines.compute.wording import plural

        console.print(f"note: {plural(len(tag_only), 'image')} referenced by tag only, not by "
                      f"digest: {', '.join(tag_only)} (`gkeflow images build` builds them and "
                      "records their digests; `gkeflow submit` refuses images never built)",
                      markup=False)
    from gkeflow.pipelines.definitions.sweep import default_sweep
    from gkeflow.pipelines.definitions.sweep_trials import TRIAL_STEP, trial_note

    engine = (config.sweep or default_sweep()).engine
    from gkeflow.pipelines.definitions.operations import notification_notes

    for compile_target in targets:
        where = config.platform_of(compile_target)  # targets.gke.autopilot: Autopilot
        notes = target_notes(as_compiled(compute, config, where), where) \
            + notification_notes(config, compile_target)
        if compute and TRIAL_STEP in compute:
            notes.append(trial_note(compile_target, engine, compute[TRIAL_STEP]))
        for note in filter(None, notes):
            console.print(f"note ({compile_target}): {note}", markup=False)


def as_compiled(compute, config, target: str) -> dict:
    """Every pipeline's steps (``compute``: defaults and overrides) with the training steps
    as the training pipeline compiles them for ``target``: its candidate steps, and
    train-model choosing among them (or training alone)."""
    from gkeflow.pipelines.definitions.training import CANDIDATE_COMPUTE
    from gkeflow.pipelines.definitions.training import resolve_compute as training_compute
    from gkeflow.pipelines.targets.compile import pipeline_compute

    training = training_compute(target, pipeline_compute("training", compute),
                                config.preparation, config.training_families())
    steps = {step: profile for step, profile in (compute or {}).items()
             if step not in CANDIDATE_COMPUTE and step != "train-model"}
    return {**steps, **{step: profile for step, profile in training.items()
                        if step.startswith("train-")}}
