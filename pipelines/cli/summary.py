"""What `gkeflow run` prints when a local run of the training or sweep pipeline ends."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def print_run_summary(console: Console, result, arguments: dict, debug: bool = False) -> None:
    """The steps, evaluation, gate, registration and paths of a finished local run."""
    console.print()
    table = Table(title="Steps", title_justify="left")
    for column in ("step", "status", "seconds"):
        table.add_column(column)
    for step in result.steps:
        table.add_row(step.name, step.status, f"{step.duration_s:.1f}")
    console.print(table)

    metrics = result.artifact_metadata("evaluate-model", "metrics")
    if metrics:
        metrics_table = Table(title="Evaluation on the test split", title_justify="left")
        metrics_table.add_column("metric")
        metrics_table.add_column("value", justify="right")
        for name, value in metrics.items():
            if name == "passed" or name.startswith("slice_"):
                continue
            shown = (f"{value:.0f}" if float(value).is_integer() and name.endswith("examples")
                     else f"{value:.4f}")
            metrics_table.add_row(name, shown)
        console.print(metrics_table)
        passed = result.parameter_outputs("evaluate-model").get("Output")
        verdict = "[green]passed[/green]" if passed else "[yellow]did not pass[/yellow]"
        if "rmse" in metrics and "accuracy" not in metrics:  # a regressor
            console.print(f"Gate: rmse {metrics['rmse']:.4g} against the mean predictor's "
                          f"{metrics.get('baseline_rmse', float('nan')):.4g}, thresholds and "
                          f"champion comparison: {verdict}")
        else:
            accuracy = metrics.get("accuracy", float("nan"))
            console.print(f"Gate: accuracy {accuracy:.4f} (min_accuracy="
                          f"{arguments['min_accuracy']:g}, champion comparison): {verdict}")
        reasons = result.artifact_metadata("evaluate-model", "evaluation").get("reasons", [])
        for reason in reasons:
            mark = "[green]✓[/green]" if reason.startswith("PASS") else "[red]✗[/red]"
            console.print(f"  {mark} ", end="")
            console.print(reason.split(" ", 1)[-1], markup=False, soft_wrap=True)
    registered = result.parameter_outputs("register-model")
    if registered:
        unchanged = result.artifact_metadata("register-model", "registered_model").get(
            "unchanged")
        console.print(f"Registered: {'unchanged: same as ' if unchanged else ''}"
                      f"[bold]{arguments['model_name']}[/bold] version "
                      f"{registered.get('model_version')} ({registered.get('resource_name')})")
    elif result.ok:
        console.print("Registered: nothing (the model did not pass the gate, for the reasons "
                      "above; --min-accuracy and --param thresholds=... set it)", markup=False)
    if result.run_dir:
        console.print(f"Artifacts: {result.run_dir}")
    if result.run_dir or result.cached_outputs:  # cached steps' outputs are in earlier runs
        model_dir = result.output_dir("train-model", "model")
        if model_dir:
            console.print(f"Model:     {model_dir}")
        trained = result.artifact_metadata("train-model", "model")
        if trained.get("strategy"):
            console.print(f"Training:  {trained['strategy']}", markup=False)
        if trained.get("model_selection"):
            console.print(f"Chosen:    {trained['model_selection']}", markup=False)
        stopped = early_stop_line(trained, arguments)
        if stopped:
            console.print(f"           {stopped}", markup=False)
        data_report = result.output_dir("prepare-data", "report")
        if data_report:
            console.print(f"Data:      {data_report}")
        model_card = result.output_dir("evaluate-model", "model_card")
        if model_card:
            console.print(f"Card:      {model_card}")
    console.print(f"Log:       {result.log_path}")
    console.print(f"Total:     {result.duration_s:.1f}s")
    if not result.ok:
        failed = result.failed_step
        console.print()
        if failed:
            console.print(f"[red bold]FAILED[/red bold]: step {failed.name}")
            from gkeflow.pipelines.cli.run_options import print_failure

            print_failure(console, failed.log, result.log_path, debug)
        else:
            console.print(f"[red bold]FAILED[/red bold]: {result.error}", markup=False)


def early_stop_line(trained: dict, arguments: dict) -> str:
    """Why training ended before ``epochs`` (early stopping), or "" when it ran them all."""
    if trained.get("model_family", "keras") != "keras":  # trees and linear have no epochs
        return ""
    epochs = int(arguments.get("epochs", 0) or 0)
    run, best = int(trained.get("epochs_run") or 0), int(trained.get("best_epoch") or 0)
    if not epochs or not run or run >= epochs:
        return ""
    patience = int(arguments.get("early_stopping_patience", 5))
    return (f"stopped early after {run} of {epochs} epochs: the eval loss had not improved "
            f"for {run - best} epochs since epoch {best} (early_stopping_patience={patience}; "
            "best weights kept); --param early_stopping_patience=0 trains every epoch")
