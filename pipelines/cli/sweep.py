"""``gkeflow run --pipeline sweep`` and the sweep parts of ``gkeflow plan``.

Kept apart from :mod:`gkeflow.pipelines.cli.run` so the command module only dispatches.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from gkeflow.pipelines.settings.platforms import platform


def sweep_options(func):
    """Flags of ``gkeflow run`` that shape a sweep (refused by the other pipelines)."""
    options = [
        click.option("--sweep-param", "sweep_params", multiple=True, metavar="NAME=SPEC",
                     help="(sweep) A searched hyperparameter, repeatable: NAME=a,b,c (choice; "
                          "';' separates hidden_units choices), NAME=uniform:LO:HI, "
                          "NAME=loguniform:LO:HI or NAME=int:LO:HI[:STEP]. Replaces the "
                          "same name in gkeflow.yaml's sweep: section."),
        click.option("--search", "algorithm", type=click.Choice(["grid", "random", "bayesian"]),
                     help="(sweep) Grid over every combination, seeded random sampling, or "
                          "bayesian (engine ray: Optuna's TPE sampler picks each trial from "
                          "the results so far)."),
        click.option("--max-trials", type=click.IntRange(1, 100),
                     help="(sweep) Number of trials (random), or the cap on the grid."),
        click.option("--parallel-trials", type=click.IntRange(1, 100),
                     help="(sweep) Trials running at once (each on its own GPU remotely)."),
        click.option("--metric", type=click.Choice(["eval_accuracy", "eval_loss"]),
                     help="(sweep) Eval-split metric trials are compared on."),
        click.option("--direction", type=click.Choice(["maximize", "minimize"]),
                     help="(sweep) Default: maximize accuracy, minimize loss."),
        click.option("--seed", type=int,
                     help="(sweep) Seed of the random or Bayesian search."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
                     help="gkeflow.yaml whose compute: section (and, for a sweep, sweep: "
                          "section) the run uses. Default: ./gkeflow.yaml when it exists "
                          "(its compute: section only with --compute)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def resolve_sweep(config_path: Path | None = None, sweep_params: tuple[str, ...] = (),
                  algorithm: str | None = None, max_trials: int | None = None,
                  parallel_trials: int | None = None, metric: str | None = None,
                  direction: str | None = None, seed: int | None = None):
    """The search space: gkeflow.yaml's ``sweep:`` (or the default one), then the flags."""
    from gkeflow.pipelines.settings.config import ConfigError, load_config
    from gkeflow.pipelines.settings.sweep_config import SweepError, default_sweep, sweep_from_flags

    try:
        configured = load_config(config_path).sweep
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if configured is None and not sweep_params:
        configured = default_sweep()
    try:
        return sweep_from_flags(configured, sweep_params, algorithm, max_trials,
                                parallel_trials, metric, direction, seed)
    except SweepError as exc:
        raise click.BadParameter(str(exc), param_hint="--sweep-param") from None


def run_sweep(console, *, data, label, output, epochs, batch_size, learning_rate, train_ratio,
              eval_ratio, test_ratio, model_name, min_accuracy, model_type, user_module,
              params, compute_overrides, key_column, exclude_columns, feature_columns,
              no_cache, require_registered, verbose, debug, config_path=None, sweep_params=(),
              task="auto",
              algorithm=None, max_trials=None, parallel_trials=None, metric=None,
              direction=None, seed=None, environment="default") -> None:
    """Run the sweep pipeline locally; print the trial table and what was registered.

    The options a training run takes mean the same here (the same helpers turn them into
    arguments and compute); ``--config`` also gives the ``sweep:`` section, and
    ``tracking.<environment>`` the MLflow tracking and registry, as for training."""
    from gkeflow.pipelines.cli.run_options import (
        OptionError,
        finish,
        local_accelerator_notes,
        local_compute,
        run_arguments,
        step_printer,
    )
    from gkeflow.pipelines.cli.summary import print_run_summary
    from gkeflow.pipelines.compute.profiles import ComputeError
    from gkeflow.pipelines.definitions.sweep import TRIAL_STEP, build_sweep_pipeline
    from gkeflow.pipelines.targets.local import LocalRunError, run_local

    sweep = resolve_sweep(config_path, sweep_params, algorithm, max_trials, parallel_trials,
                          metric, direction, seed)
    compute = local_compute("sweep", config_path, compute_overrides)
    replicas = compute[TRIAL_STEP].replicas if compute and TRIAL_STEP in compute else 1
    if replicas > 1:
        raise OptionError(f"{TRIAL_STEP}.replicas={replicas} does not apply to --pipeline "
                          "sweep: each trial trains in one process; set replicas to 1")
    from gkeflow.pipelines.cli.common import read_config
    from gkeflow.pipelines.cli.run_tracking import local_tracking, log_to_vertex, tracked_run

    config = read_config(config_path)
    for note in local_accelerator_notes(compute, config.compute, compute_overrides):
        console.print(f"[yellow]{note}[/yellow]", highlight=False)
    try:
        pipeline = build_sweep_pipeline("local", compute=compute, sweep=sweep,
                                        preparation=config.preparation)
    except ComputeError as exc:
        raise click.ClickException(str(exc)) from None
    arguments = run_arguments(
        pipeline, "sweep", data=data, label=label, output=output, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, train_ratio=train_ratio,
        eval_ratio=eval_ratio, test_ratio=test_ratio, model_name=model_name,
        min_accuracy=min_accuracy, model_type=model_type, user_module=user_module,
        params=params, key_column=key_column, exclude_columns=exclude_columns,
        feature_columns=feature_columns, task=task, notes=(notes := []),
        decided=(decided := {}))
    from gkeflow.pipelines.settings.sweep_config import family_problem

    problem = family_problem(sweep, str(arguments.get("model_type", model_type)))
    if problem:
        raise OptionError(problem)
    output = Path(output).resolve()
    if decided.get("task", arguments.get("task")) == "regression" and arguments.get(
            "metric", sweep.metric) == "eval_accuracy":
        from gkeflow.components.sweep.logic import REGRESSION_METRICS

        # a regressor has no accuracy: the selection step's own rule, said before the run
        metric, direction = REGRESSION_METRICS["eval_accuracy"]
        arguments.update(metric=metric, direction=direction)
        sweep = sweep.model_copy(update={"metric": metric, "direction": direction})
        notes.append(f"trials compared on {metric} ({direction}): eval_accuracy does not "
                     "apply to regression")
    trials = arguments.get("trials") or pipeline.component_spec.inputs["trials"].default
    from gkeflow.pipelines.compute.wording import counted

    console.print(f"[bold]gkeflow run[/bold]: sweep of {counted(len(trials), 'trial')}, "
                  f"{sweep.parallel_trials} at a time ({sweep.algorithm} search over "
                  f"{', '.join(sweep.tuned)}; {sweep.direction} {sweep.metric}) on "
                  f"{data or 'the bundled Palmer Penguins data'} "
                  f"(label: {arguments['label_column']})")
    for note in notes:  # the task and the metric, under the header that names the run
        console.print(note, markup=False, highlight=False)

    on_event = step_printer(console)

    tracking = local_tracking(console, config, environment, params, arguments)
    try:
        with tracked_run(console, tracking, "sweep", output) as tracked:
            result = run_local(arguments, output, echo_logs=verbose, on_event=on_event,
                               enable_caching=not no_cache, pipeline=pipeline)
            tracked.succeeded = result.ok
    except LocalRunError as exc:
        raise click.ClickException(str(exc)) from exc
    log_to_vertex(console, config, tracking, tracked, arguments, result, "evaluate-model")
    print_trial_table(console, result)
    print_run_summary(console, result, arguments, debug)
    from gkeflow.pipelines.cli.deploy_local import print_local_deployment

    print_local_deployment(console, result, output)
    finish(console, result, require_registered)


def print_trial_table(console, result) -> None:
    """The trial table the selection step wrote, best first (nothing when it did not run)."""
    from rich.table import Table

    # the step that selected: select-best-trial after ParallelFor, tune-with-ray with Ray
    selecting = next((s.name for s in result.steps if s.name == "tune-with-ray"),
                     "select-best-trial")
    rows = json.loads(result.parameter_outputs(selecting).get("table") or "[]")
    if not rows:
        failed = [line for step in result.steps if step.name == selecting
                  for line in step.error_lines(3)]
        if failed:
            console.print("\n".join(failed), markup=False, soft_wrap=True)
        return
    console.print()
    metric = next(k for k in rows[0] if k not in ("rank", "trial_id", "status"))
    table = Table(title=f"Trials by {metric}, best first", title_justify="left")
    columns = [c for c in rows[0] if c != "error" or any(r.get("error") for r in rows)]
    for column in columns:
        table.add_column(column, justify="right" if column in ("rank", metric) else "left")
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column)
            cells.append("" if value is None else f"{value:.4f}" if column == metric
                         else str(value))
        table.add_row(*cells)
    console.print(table)
    stopped = sum(row.get("status") == "stopped" for row in rows)
    if stopped:  # engine ray: the scheduler ended them (their epochs: the step's log)
        console.print(f"{stopped} of {len(rows)} trials stopped early by the scheduler",
                      highlight=False)
    best = rows[0]
    console.print(f"Best trial: [bold]{best['trial_id']}[/bold] ({metric} "
                  f"{best[metric]:.4f})")
    model_dir = result.output_dir(selecting, "best_model")
    if model_dir:
        console.print(f"Best model: {model_dir} (with sweep.json)", markup=False)


def plan_lines(sweep, profiles, target: str) -> list[str]:
    """What `gkeflow plan sweep` adds below the step table."""
    from gkeflow.pipelines.definitions.sweep import sweep_plan
    from gkeflow.pipelines.definitions.sweep_trials import uses_ray, uses_vizier

    figures = sweep_plan(sweep, profiles)
    where = "a KubeRay cluster (RayJob)" if platform(target).kubernetes else "a local Ray instance"
    engine = ("Vertex AI hyperparameter tuning job (Vizier)" if uses_vizier(target, sweep.engine)
              else f"Ray Tune on {where}, scheduler {sweep.scheduler}"
              if uses_ray(target, sweep.engine) else "ParallelFor")
    from gkeflow.pipelines.compute.wording import counted

    cluster = []
    if platform(target).kubernetes and uses_ray(target, sweep.engine):
        from gkeflow.pipelines.compute.engines.kuberay import describe
        from gkeflow.pipelines.definitions.sweep import RAY_HEAD, TRIAL_STEP

        cluster = [f"sweep: {describe(profiles[TRIAL_STEP], profiles[RAY_HEAD])}; priced "
                   f"above as {TRIAL_STEP} (the trial workers, for the sweep's deadline) and "
                   f"{RAY_HEAD}",
                   "sweep: needs the KubeRay operator 1.1 or newer in the cluster (ray.io/v1 "
                   "RayJob) and deploy/rbac/rayjob-launcher.yaml for the pipeline's account"]
    return cluster + [
        f"sweep: {counted(figures['trials'], 'trial')}, {sweep.algorithm} search over "
        f"{', '.join(sweep.tuned)}; best by {sweep.metric} ({sweep.direction}); {engine}",
        f"sweep: {counted(figures['gpus_per_trial'], 'GPU')} per trial, at most "
        f"{counted(figures['parallel_trials'], 'trial')} at once = at most "
        f"{counted(figures['max_gpus_at_once'], 'GPU')} in use at once",
    ]
