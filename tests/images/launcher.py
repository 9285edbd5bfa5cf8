"""Play the KFP launcher for a compiled pipeline: each step's own command and args, with
an executor input written the way the KFP v2 driver and launcher write it.

For every task of the compiled pipeline's DAG (in dependency order, descending into
``dsl.If`` groups whose condition holds), :class:`Launcher` resolves the task's inputs —
pipeline parameters, upstream output parameters and artifacts, runtime placeholders such as
``{{$.pipeline_root}}`` — into an ``--executor_input`` JSON with ``inputs.parameterValues``,
``inputs.artifacts``, ``outputs.artifacts.<name>.artifacts[0].uri``,
``outputs.parameters.<name>.outputFile`` and ``outputs.outputFile``, substitutes it for
``{{$}}`` in the step's args, and hands ``command + args`` to a runner. Artifact URIs use the
open-source backend's default ``minio://`` root, which the KFP SDK maps to ``/minio/...``;
the runner mounts the artifact store there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"
WORKSPACE = "/kfp-workspace"
#: Where the executor writes its output file, inside the step's file system.
OUTPUTS = "/kfp-outputs"

_CONDITION = re.compile(r"^inputs\.parameter_values\['([^']+)'\] == (true|false)$")
_INPUT_PLACEHOLDER = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")


def _cast(value: Any, parameter_type: str) -> Any:
    if parameter_type == "NUMBER_INTEGER" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass
class StepRun:
    """One step's executor input, its process output and its executor output."""

    task: str
    executor_input: dict
    log: str
    returncode: int
    executor_output: dict = field(default_factory=dict)

    def metadata(self, artifact: str) -> dict:
        entries = self.executor_output.get("artifacts", {}).get(artifact, {}).get("artifacts", [])
        return dict(entries[0].get("metadata", {})) if entries else {}


Runner = Callable[[str, list[str]], tuple[int, str]]


class Launcher:
    """Runs a compiled pipeline's tasks through ``runner(task, argv) -> (returncode, log)``.

    Args:
        spec: The compiled pipeline's first YAML document (the PipelineSpec).
        arguments: Pipeline parameters overriding the compiled defaults.
        store: Host folder holding the artifact store (``minio://`` root -> ``store/``).
        outputs: Host folder the runner mounts at :data:`OUTPUTS`.
        overrides: task name -> {parameter: value}, applied after resolution.
        run_id: Stands for ``{{$.pipeline_job_uuid}}``.
    """

    def __init__(self, spec: dict, arguments: dict[str, Any], store: Path, outputs: Path,
                 overrides: dict[str, dict[str, Any]] | None = None,
                 run_id: str = "image-test-run"):
        self.spec = spec
        self.store, self.outputs = store, outputs
        self.overrides = overrides or {}
        self.run_id = run_id
        root = spec["root"]["inputDefinitions"]["parameters"]
        self.pipeline_parameters = {
            name: _cast(arguments.get(name, p.get("defaultValue")), p["parameterType"])
            for name, p in root.items()}
        self.runs: dict[str, StepRun] = {}
        self.artifacts: dict[tuple[str, str], dict] = {}
        self.parameters: dict[tuple[str, str], Any] = {}

    def executor(self, component: str) -> dict:
        label = self.spec["components"][component]["executorLabel"]
        return self.spec["deploymentSpec"]["executors"][label]["container"]

    def run(self, runner: Runner) -> dict[str, StepRun]:
        """Run every task in dependency order; stop at the first failed step."""
        self._run_dag(self.spec["root"]["dag"], self.pipeline_parameters, {}, runner)
        return self.runs

    @staticmethod
    def _order(tasks: dict) -> list[str]:
        done: list[str] = []
        while len(done) < len(tasks):
            ready = sorted(name for name, task in tasks.items() if name not in done
                           and set(task.get("dependentTasks", [])) <= set(done))
            if not ready:
                raise ValueError(f"cycle among {sorted(set(tasks) - set(done))}")
            done.extend(ready)
        return done

    def _run_dag(self, dag: dict, scope_params: dict, scope_artifacts: dict,
                 runner: Runner) -> None:
        for name in self._order(dag["tasks"]):
            task = dag["tasks"][name]
            params, artifacts = self._resolve(task, scope_params, scope_artifacts)
            component = self.spec["components"][task["componentRef"]["name"]]
            if "dag" in component:
                condition = (task.get("triggerPolicy") or {}).get("condition", "")
                if condition and not self._holds(condition, params):
                    continue
                self._run_dag(component["dag"], params, artifacts, runner)
                continue
            self._run_step(name, task["componentRef"]["name"], params, artifacts, runner)
            if self.runs[name].returncode != 0:
                return

    @staticmethod
    def _holds(condition: str, params: dict) -> bool:
        match = _CONDITION.match(condition)
        if not match:
            raise ValueError(f"condition not understood: {condition}")
        return params[match.group(1)] is (match.group(2) == "true")

    def _resolve(self, task: dict, scope_params: dict,
                 scope_artifacts: dict) -> tuple[dict, dict]:
        inputs = task.get("inputs", {})
        params: dict[str, Any] = {}
        for key, source in inputs.get("parameters", {}).items():
            if "componentInputParameter" in source:
                params[key] = scope_params[source["componentInputParameter"]]
            elif "taskOutputParameter" in source:
                ref = source["taskOutputParameter"]
                params[key] = self.parameters[(ref["producerTask"], ref["outputParameterKey"])]
            elif "runtimeValue" in source:
                params[key] = source["runtimeValue"]["constant"]
        for key, value in params.items():
            if isinstance(value, str):
                params[key] = self._placeholders(value, task["taskInfo"]["name"], params)
        artifacts: dict[str, dict] = {}
        for key, source in inputs.get("artifacts", {}).items():
            if "componentInputArtifact" in source:
                artifacts[key] = scope_artifacts[source["componentInputArtifact"]]
            else:
                ref = source["taskOutputArtifact"]
                artifacts[key] = self.artifacts[(ref["producerTask"], ref["outputArtifactKey"])]
        return params, artifacts

    def _placeholders(self, value: str, task_name: str, params: dict) -> Any:
        fixed = {"{{$.pipeline_job_uuid}}": self.run_id,
                 "{{$.pipeline_task_name}}": task_name,
                 "{{$.pipeline_root}}": PIPELINE_ROOT,
                 "{{$.workspace_path}}": WORKSPACE}
        if value in fixed:
            return fixed[value]
        return _INPUT_PLACEHOLDER.sub(lambda m: str(params[m.group(1)]), value)

    def _run_step(self, task: str, component_name: str, params: dict, artifacts: dict,
                  runner: Runner) -> None:
        component = self.spec["components"][component_name]
        definitions = component.get("inputDefinitions", {}).get("parameters", {})
        values = {key: _cast(value, definitions[key]["parameterType"])
                  for key, value in params.items() if key in definitions}
        values.update(self.overrides.get(task, {}))
        outputs = component.get("outputDefinitions", {})
        output_artifacts = {}
        for name, definition in outputs.get("artifacts", {}).items():
            uri = f"{PIPELINE_ROOT}/{self.run_id}/{task}/{name}"
            output_artifacts[name] = {"artifacts": [{
                "name": name, "type": definition["artifactType"], "uri": uri, "metadata": {}}]}
        executor_input = {
            "inputs": {
                "parameterValues": values,
                "artifacts": {key: {"artifacts": [artifact]}
                              for key, artifact in artifacts.items()},
            },
            "outputs": {
                "parameters": {name: {"outputFile": f"{OUTPUTS}/{task}/parameters/{name}"}
                               for name in outputs.get("parameters", {})},
                "artifacts": output_artifacts,
                "outputFile": f"{OUTPUTS}/{task}/output_metadata.json",
            },
        }
        container = self.executor(component_name)
        args = [json.dumps(executor_input) if arg == "{{$}}" else arg
                for arg in container.get("args", [])]
        returncode, log = runner(task, [*container["command"], *args])
        run = StepRun(task, executor_input, log, returncode)
        self.runs[task] = run
        output_file = self.outputs / task / "output_metadata.json"
        if returncode != 0 or not output_file.exists():
            run.returncode = returncode or 1
            return
        run.executor_output = json.loads(output_file.read_text(encoding="utf-8"))
        for name, value in run.executor_output.get("parameterValues", {}).items():
            self.parameters[(task, name)] = value
        for name, entry in output_artifacts.items():
            artifact = dict(entry["artifacts"][0])
            produced = run.executor_output.get("artifacts", {}).get(name, {}).get("artifacts")
            if produced:
                artifact["metadata"] = produced[0].get("metadata", {})
            self.artifacts[(task, name)] = artifact
