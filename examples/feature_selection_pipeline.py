"""Build your own pipeline: gkeflow's components, a component of your own, per-step compute.

The pipeline prepares the data with gkeflow's ``prepare_data``, runs a step written here,
``select_features`` (it drops feature columns by name, by their share of missing values in
the train split, or because they hold a single value), then trains, evaluates and
registers with gkeflow's components on the selected features only.

Every step's compute is declared once in :data:`COMPUTE` and applied per target with
gkeflow's helper (:func:`gkeflow.pipelines.compute.profiles.apply_compute`), so the same definition
runs locally with ``kfp.local`` and compiles for Kubeflow Pipelines on GKE and for Vertex
AI Pipelines::

    python examples/feature_selection_pipeline.py run --output /tmp/fs --epochs 3
    python examples/feature_selection_pipeline.py compile --target gke --output fs.gke.yaml
    python examples/feature_selection_pipeline.py compile --target vertex --output fs.vertex.yaml
"""

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Output

from gkeflow.components import evaluate_model, prepare_data, register_model, train_model
from gkeflow.components.images import CPU_IMAGE
from gkeflow.pipelines.compute.profiles import ComputeProfile, apply_compute, validate_profiles

PIPELINE_NAME = "penguins-feature-selection"
EMBEDDED_PENGUINS = "embedded://penguins"


# A component of your own. Its body is all that is shipped to the step (module-level
# imports are not), so it imports what it needs inside. It runs in gkeflow's CPU image,
# which already holds kfp, so nothing is installed at run time.
@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def select_features(
    dataset: Input[Dataset],
    schema: Input[Artifact],
    selected_schema: Output[Artifact],
    report: Output[Markdown],
    drop_columns: str = "",
    max_missing_fraction: float = 0.2,
) -> int:
    """Keeps the feature columns worth training on; the others are marked ignored.

    Args:
        dataset: Splits written by prepare_data (its stats.json is read).
        schema: schema.json written by prepare_data.
        selected_schema: The same schema with dropped features' role set to ignored.
        report: Which features were kept or dropped, and why.
        drop_columns: Feature columns to drop by name, comma-separated.
        max_missing_fraction: Drop a feature missing in more than this fraction of the
            train split's rows.

    Returns:
        The number of features kept.
    """
    import json
    from pathlib import Path

    document = json.loads(Path(schema.path).read_text(encoding="utf-8"))
    stats = json.loads((Path(dataset.path) / "stats.json").read_text(encoding="utf-8"))
    train_columns = stats["splits"]["train"]["columns"]
    features = [c for c in document["columns"] if c["role"] == "feature"]
    wanted_gone = {name.strip() for name in drop_columns.split(",") if name.strip()}
    unknown = sorted(wanted_gone - {c["name"] for c in features})
    if unknown:
        raise ValueError(f"drop_columns names no feature column: {', '.join(unknown)}; "
                         f"features are {', '.join(c['name'] for c in features)}")
    lines = ["# Feature selection", "", "| feature | decision |", "|---|---|"]
    for column in features:
        column_stats = train_columns.get(column["name"], {})
        count = column_stats.get("count") or 0
        missing = (column_stats.get("missing") or 0) / count if count else 0.0
        reason = ""
        if column["name"] in wanted_gone:
            reason = "dropped by drop_columns"
        elif count and missing > max_missing_fraction:
            reason = f"missing in {missing:.0%} of train rows (> {max_missing_fraction:.0%})"
        elif column_stats.get("std") == 0 or column_stats.get("distinct") == 1:
            reason = "a single value in the train split"
        if reason:
            column["role"], column["note"] = "ignored", reason
        lines.append(f"| {column['name']} | {reason or 'kept'} |")
    kept = [c["name"] for c in features if c["role"] == "feature"]
    if not kept:
        raise ValueError("every feature was dropped; relax max_missing_fraction or "
                         "drop_columns")
    Path(selected_schema.path).parent.mkdir(parents=True, exist_ok=True)
    Path(selected_schema.path).write_text(json.dumps(document, indent=2), encoding="utf-8")
    Path(report.path).parent.mkdir(parents=True, exist_ok=True)
    Path(report.path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    selected_schema.metadata["features"] = kept
    print(f"kept {len(kept)} feature(s): {', '.join(kept)}")
    return len(kept)


#: Each step's compute, declared once; only training asks for a GPU. The helper turns it
#: into GKE requests/limits + node selector + toleration, or Vertex AI machine settings.
COMPUTE: Mapping[str, ComputeProfile] = {
    "prepare-data": ComputeProfile(cpu="2", memory="8G", caching=False, timeout_s=3600),
    "select-features": ComputeProfile(cpu="1", memory="2G", timeout_s=600),
    "train-model": ComputeProfile(
        cpu="7", memory="26G", accelerator="nvidia-tesla-t4", accelerator_count=1,
        timeout_s=6 * 3600, retries=2, retry_backoff_s=60, retry_backoff_factor=2.0,
        retry_max_duration_s=3600,
    ),
    "evaluate-model": ComputeProfile(cpu="2", memory="8G", caching=False, timeout_s=3600),
    "register-model": ComputeProfile(
        cpu="1", memory="2G", caching=False, timeout_s=600, retries=2, retry_backoff_s=30,
        retry_backoff_factor=2.0, retry_max_duration_s=600,
    ),
}


def build_pipeline(target: str = "local", compute: Mapping[str, ComputeProfile] | None = None):
    """The pipeline with each step's compute (``COMPUTE``, then ``compute``) for ``target``."""
    profiles = {**COMPUTE, **(compute or {})}
    validate_profiles(profiles, target)

    def configure(task: dsl.PipelineTask, step: str) -> dsl.PipelineTask:
        return apply_compute(task, profiles[step], target)

    @dsl.pipeline(name=PIPELINE_NAME)
    def feature_selection_pipeline(
        data_uri: str = EMBEDDED_PENGUINS,
        label_column: str = "species",
        drop_columns: str = "year",
        max_missing_fraction: float = 0.2,
        epochs: int = 20,
        model_name: str = "penguins-selected-features",
        min_accuracy: float = 0.8,
        registry_uri: str = "sqlite:///gkeflow-registry.db",
    ):
        """Trains a classifier on the features worth keeping and registers it when blessed.

        Args:
            data_uri: CSV to train on; embedded://penguins is the bundled Palmer Penguins data.
            label_column: Column holding the class to predict.
            drop_columns: Feature columns to leave out, comma-separated.
            max_missing_fraction: Leave out features missing in more than this fraction of rows.
            epochs: Passes over the training split.
            model_name: Name under which the model is registered.
            min_accuracy: Test accuracy required before the model is registered.
            registry_uri: Model registry: sqlite:///<path>, vertex://projects/<p>/locations/<l>
                or kubeflow://host:port.
        """
        prepare = configure(prepare_data(data_uri=data_uri, label_column=label_column),
                            "prepare-data")
        select = configure(
            select_features(
                dataset=prepare.outputs["dataset"],
                schema=prepare.outputs["schema"],
                drop_columns=drop_columns,
                max_missing_fraction=max_missing_fraction,
            ),
            "select-features",
        )
        train = configure(
            train_model(
                dataset=prepare.outputs["dataset"],
                schema=select.outputs["selected_schema"],
                epochs=epochs,
                require_gpu=target != "local" and profiles["train-model"].uses_gpu,
            ),
            "train-model",
        )
        evaluate = configure(
            evaluate_model(
                dataset=prepare.outputs["dataset"],
                schema=select.outputs["selected_schema"],
                model=train.outputs["model"],
                min_accuracy=min_accuracy,
                model_name=model_name,
                registry_uri=registry_uri,
            ),
            "evaluate-model",
        )
        with dsl.If(evaluate.outputs["Output"] == True, name="model-blessed"):  # noqa: E712
            configure(
                register_model(
                    model=train.outputs["model"],
                    metrics=evaluate.outputs["metrics"],
                    model_name=model_name,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    pipeline_task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                    registry_uri=registry_uri,
                    data_uri=data_uri,
                ),
                "register-model",
            )

    return feature_selection_pipeline


def run_locally(output_dir: Path, **arguments) -> Path:
    """Run the pipeline with ``kfp.local`` (steps as subprocesses); returns the run directory."""
    from gkeflow.pipelines.targets.local import init_local

    root = Path(output_dir).resolve() / "runs"
    root.mkdir(parents=True, exist_ok=True)
    before = set(root.iterdir())
    init_local(pipeline_root=str(root),
               enable_caching=False)
    build_pipeline("local")(**arguments)
    (run_dir,) = set(root.iterdir()) - before
    return run_dir


def compile_for(target: str, path: Path) -> Path:
    """Compile for ``gke`` (kfp-kubernetes settings) or ``vertex`` (one YAML document), with
    the images of ./gkeflow.yaml's ``images:`` registry (pinned by `gkeflow images build`)."""
    from kfp import compiler

    from gkeflow.pipelines.targets.image_mapping import map_compiled_file

    compiler.Compiler().compile(build_pipeline(target), str(path))
    return map_compiled_file(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run locally with kfp.local")
    run.add_argument("--output", type=Path, default=Path("gkeflow-output/feature-selection"))
    run.add_argument("--epochs", type=int, default=20)
    run.add_argument("--registry-uri", default="sqlite:///gkeflow-registry.db")
    compile_ = commands.add_parser("compile", help="compile for GKE or Vertex AI")
    compile_.add_argument("--target", choices=["gke", "vertex"], required=True)
    compile_.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "run":
        run_dir = run_locally(args.output, epochs=args.epochs, registry_uri=args.registry_uri)
        print(f"run finished: {run_dir}")
    else:
        print(f"wrote {compile_for(args.target, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
