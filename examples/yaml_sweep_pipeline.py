"""A sweep built from gkeflow's component YAML files alone, without installing gkeflow.

Fan-out preparation (``plan_prepare`` -> one ``prepare_group`` per group of input files ->
``merge_prepared``), then the trials, then the best trial's evaluation and registration::

    python examples/yaml_sweep_pipeline.py compiled/components gke out.gke.yaml
    python examples/yaml_sweep_pipeline.py compiled/components vertex out.vertex.yaml
    python examples/yaml_sweep_pipeline.py compiled/components vertex-vizier out.vizier.yaml

gke and vertex: a ``ParallelFor`` of ``train_model`` trials (one GPU each) and
``select_best_trial``; vertex-vizier: one ``tune_with_vizier`` step, which runs the trials
as a Vertex AI hyperparameter tuning job (its ``tuning_spec``, the study, machine and
scheduling as JSON, is a pipeline parameter). On Vertex AI the model is registered with
``register_model_vertex``. This file imports kfp only; the tests check that running it
never imports gkeflow.
"""

import sys
from pathlib import Path

from kfp import compiler, dsl
from kfp.components import load_component_from_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from yaml_components_pipeline import on_gpu  # noqa: E402  (kfp only, like this file)

TARGETS = ("gke", "vertex", "vertex-vizier")
TRIALS = [{"trial_id": "trial-000", "learning_rate": 0.001},
          {"trial_id": "trial-001", "learning_rate": 0.01}]
COMPONENTS = ("plan_prepare", "prepare_group", "merge_prepared", "train_model",
              "select_best_trial", "tune_with_vizier", "evaluate_model", "register_model",
              "register_model_vertex")


def build_pipeline(components_dir: Path, target: str):
    """The sweep from YAML components; GPU settings spelled for ``target``."""
    load = {name: load_component_from_file(str(Path(components_dir) / f"{name}.yaml"))
            for name in COMPONENTS}
    platform = "gke" if target == "gke" else "vertex"
    register = load["register_model" if platform == "gke" else "register_model_vertex"]

    @dsl.pipeline(name="sweep-from-component-yaml")
    def yaml_sweep_pipeline(
        data_uri: str = "gs://my-bucket/data/*.csv",
        label_column: str = "species",
        trials: list = TRIALS,
        epochs: int = 20,
        model_name: str = "sweep-from-yaml",
        registry_uri: str = "sqlite:///gkeflow-registry.db",
        tuning_spec: str = "{}",
    ):
        plan = load["plan_prepare"](data_uri=data_uri, label_column=label_column)
        plan.set_caching_options(False)
        with dsl.ParallelFor(plan.outputs["Output"], parallelism=4, name="groups") as group:
            part = load["prepare_group"](plan=plan.outputs["plan"], group=group)
        merged = load["merge_prepared"](plan=plan.outputs["plan"],
                                        parts=dsl.Collected(part.outputs["part"]))
        dataset, schema = merged.outputs["dataset"], merged.outputs["schema"]
        if target == "vertex-vizier":
            best = load["tune_with_vizier"](
                dataset=dataset, schema=schema, trials=trials, spec=tuning_spec,
                tuned="learning_rate", epochs=epochs, require_gpu=True,
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER)
        else:
            with dsl.ParallelFor(items=trials, parallelism=2, name="trials") as trial:
                train = on_gpu(load["train_model"](
                    dataset=dataset, schema=schema, epochs=epochs,
                    learning_rate=trial.learning_rate, require_gpu=True,
                    checkpoint_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    task_name=trial.trial_id, continue_on_error=True,
                ), platform)
            best = load["select_best_trial"](
                trials=trials, reports=dsl.Collected(train.outputs["Output"]),
                models=dsl.Collected(train.outputs["model"]), tuned="learning_rate")
        best.set_caching_options(False)
        evaluate = load["evaluate_model"](
            dataset=dataset, schema=schema, model=best.outputs["best_model"],
            model_name=model_name, registry_uri=registry_uri,
        ).set_caching_options(False)
        with dsl.If(evaluate.outputs["Output"] == True, name="model-blessed"):  # noqa: E712
            register(
                model=best.outputs["best_model"], metrics=evaluate.outputs["metrics"],
                model_name=model_name, pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                pipeline_task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                registry_uri=registry_uri, labels=best.outputs["labels"], data_uri=data_uri,
            ).set_caching_options(False)

    return yaml_sweep_pipeline


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in TARGETS:
        print(__doc__, file=sys.stderr)
        return 2
    components_dir, target, output = Path(argv[0]), argv[1], Path(argv[2])
    compiler.Compiler().compile(build_pipeline(components_dir, target), str(output))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
