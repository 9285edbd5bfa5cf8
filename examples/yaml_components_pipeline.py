"""A pipeline built from gkeflow's component YAML files alone, without installing gkeflow.

Teams that do not want gkeflow's Python package in their repository load the components
from ``compiled/components/<component>.yaml`` (a release's files, by path or URL) and set
each step's compute with plain KFP and kfp-kubernetes calls::

    python examples/yaml_components_pipeline.py compiled/components gke out.gke.yaml
    python examples/yaml_components_pipeline.py compiled/components vertex out.vertex.yaml

This file imports kfp only; the tests check that running it never imports gkeflow.
"""

import sys
from pathlib import Path

from kfp import compiler, dsl
from kfp.components import load_component_from_file

GKE_GPU = "nvidia-tesla-t4"
VERTEX_GPU = "NVIDIA_TESLA_T4"


def on_gpu(task: dsl.PipelineTask, target: str) -> dsl.PipelineTask:
    """One T4 for ``task``, spelled as ``target`` (gke or vertex) wants it."""
    task.set_cpu_limit("7").set_memory_limit("26G").set_accelerator_limit(1)
    if target == "gke":
        from kfp import kubernetes

        task.set_accelerator_type("nvidia.com/gpu")
        kubernetes.add_node_selector(task, "cloud.google.com/gke-accelerator", GKE_GPU)
        kubernetes.add_toleration(task, key="nvidia.com/gpu", operator="Exists",
                                  effect="NoSchedule")
    else:
        task.set_accelerator_type(VERTEX_GPU)
    return task


def build_pipeline(components_dir: Path, target: str):
    """The four gkeflow steps loaded from YAML; GPU settings spelled for ``target``."""
    load = {name: load_component_from_file(str(Path(components_dir) / f"{name}.yaml"))
            for name in ("prepare_data", "train_model", "evaluate_model", "register_model")}

    @dsl.pipeline(name="penguins-from-component-yaml")
    def yaml_components_pipeline(
        data_uri: str = "embedded://penguins",
        label_column: str = "species",
        epochs: int = 20,
        model_name: str = "penguins-from-yaml",
        registry_uri: str = "sqlite:///gkeflow-registry.db",
    ):
        prepare = load["prepare_data"](data_uri=data_uri, label_column=label_column)
        prepare.set_cpu_limit("2").set_memory_limit("8G").set_caching_options(False)
        train = on_gpu(load["train_model"](
            dataset=prepare.outputs["dataset"], schema=prepare.outputs["schema"],
            epochs=epochs, require_gpu=True,
        ), target)
        evaluate = load["evaluate_model"](
            dataset=prepare.outputs["dataset"], schema=prepare.outputs["schema"],
            model=train.outputs["model"], model_name=model_name, registry_uri=registry_uri,
        ).set_caching_options(False)
        with dsl.If(evaluate.outputs["Output"] == True, name="model-blessed"):  # noqa: E712
            load["register_model"](
                model=train.outputs["model"], metrics=evaluate.outputs["metrics"],
                model_name=model_name, pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                pipeline_task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER,
                registry_uri=registry_uri, data_uri=data_uri,
            ).set_caching_options(False)

    return yaml_components_pipeline


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("gke", "vertex"):
        print(__doc__, file=sys.stderr)
        return 2
    components_dir, target, output = Path(argv[0]), argv[1], Path(argv[2])
    compiler.Compiler().compile(build_pipeline(components_dir, target), str(output))
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
