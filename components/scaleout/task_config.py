"""The launcher task's Kubernetes settings, handed over by KFP, merged into the JobSet's pods.

KFP ≥ 2.15 passes a task's Kubernetes settings to its component as a ``dsl.TaskConfig``
(``task_config_passthroughs``; the driver fills it, see kubeflow/pipelines
``backend/src/v2/driver``). ``train_model_jobset`` declares:

- ``KUBERNETES_NODE_SELECTOR``, ``KUBERNETES_TOLERATIONS``, ``KUBERNETES_AFFINITY``:
  forwarded to the workers only (``apply_to_task=False``), so a GPU node selector or
  toleration set on the task never pins the 1-CPU launcher pod to a GPU node.
- ``RESOURCES``, ``ENV`` and ``KUBERNETES_VOLUMES``: forwarded and kept on the launcher too
  (``apply_to_task=True``): the launcher pod keeps its own CPU/memory requests (the
  launcher profile), and the JobSet pods take the profile's requests, which win.

Precedence, field by field (:func:`merge_task_config`): what the step's compute profile put
in the JobSet template wins; the task's settings fill in what the profile does not set.

- resources: a resource name the template requests or limits keeps the template's value;
  others (e.g. ``ephemeral-storage`` when the profile has none) are added;
- node selector: the template's keys win, other keys are added;
- tolerations: the template's, plus the task's not already there;
- affinity: per kind (``nodeAffinity``, ``podAffinity``, ``podAntiAffinity``), the
  template's when it has one, else the task's;
- env: a variable the template sets keeps its value (the worker host list is set last, at
  launch); others are added;
- volumes: added with their mounts unless the name or mount path is taken, except
  PersistentVolumeClaims: the JobSet's pods run on several nodes, which a ReadWriteOnce
  claim (the usual kind, e.g. the KFP workspace) cannot follow, so they are left out with a
  note (inputs and the model move through Cloud Storage instead).
"""

from __future__ import annotations

import copy
from typing import Any

PASSTHROUGH_FIELDS = ("resources", "node_selector", "tolerations", "affinity", "env",
                      "volumes", "volume_mounts")


def as_dict(task_config: Any) -> dict[str, Any]:
    """A ``dsl.TaskConfig`` (or a dict of its fields) as a dict of the fields that are set."""
    if task_config is None:
        return {}
    if isinstance(task_config, dict):
        values = task_config
    else:
        values = {name: getattr(task_config, name, None) for name in PASSTHROUGH_FIELDS}
    unknown = sorted(set(values) - set(PASSTHROUGH_FIELDS))
    if unknown:
        raise ValueError(f"unknown task config field(s) {', '.join(unknown)}")
    return {k: v for k, v in values.items() if v}


def _merge_resources(container: dict, resources: dict) -> None:
    current = container.setdefault("resources", {})
    # a resource the profile requests or limits is the profile's, in both lists
    explicit = set(current.get("requests", {})) | set(current.get("limits", {}))
    for kind in ("requests", "limits"):
        extra = (resources or {}).get(kind) or {}
        if not extra:
            continue
        target = current.setdefault(kind, {})
        for name, value in extra.items():
            if name not in explicit:
                target[name] = value


def merge_task_config(template: dict, task_config: Any) -> tuple[dict, list[str]]:
    """``template`` (a JobSet) with the task's settings merged into its pod template.

    Returns:
        (the merged copy, notes on what was left out and why).
    """
    config = as_dict(task_config)
    manifest = copy.deepcopy(template)
    if not config:
        return manifest, []
    notes: list[str] = []
    for replicated in manifest["spec"]["replicatedJobs"]:  # chief and workers alike
        pod = replicated["template"]["spec"]["template"]["spec"]
        for note in _merge_into_pod(pod, config):
            if note not in notes:
                notes.append(note)
    return manifest, notes


def _merge_into_pod(pod: dict, config: dict) -> list[str]:
    """Merge the task's ``config`` into one pod spec; notes on what was left out."""
    notes: list[str] = []
    container = pod["containers"][0]

    if config.get("resources"):
        _merge_resources(container, config["resources"])

    if config.get("node_selector"):
        pod["nodeSelector"] = {**config["node_selector"], **pod.get("nodeSelector", {})}

    if config.get("tolerations"):
        tolerations = pod.setdefault("tolerations", [])
        for toleration in config["tolerations"]:
            if toleration not in tolerations:
                tolerations.append(toleration)

    if config.get("affinity"):
        affinity = pod.setdefault("affinity", {})
        for kind, value in config["affinity"].items():
            affinity.setdefault(kind, value)

    if config.get("env"):
        env = container.setdefault("env", [])
        names = {e["name"] for e in env}
        env.extend(e for e in config["env"] if e.get("name") not in names)

    volumes = pod.setdefault("volumes", [])
    mounts = container.setdefault("volumeMounts", [])
    taken_names = {v["name"] for v in volumes}
    taken_paths = {m["mountPath"] for m in mounts}
    added: set[str] = set()
    for volume in config.get("volumes") or []:
        name = volume.get("name", "")
        if "persistentVolumeClaim" in volume:
            notes.append(f"volume {name} (PersistentVolumeClaim "
                         f"{volume['persistentVolumeClaim'].get('claimName', '')}) is not "
                         "mounted in the JobSet's pods: they run on several nodes")
        elif name in taken_names:
            notes.append(f"volume {name} is not mounted in the JobSet's pods: the compute "
                         "profile uses that name")
        else:
            volumes.append(volume)
            taken_names.add(name)
            added.add(name)
    for mount in config.get("volume_mounts") or []:
        if mount.get("name") not in added:
            continue
        if mount.get("mountPath") in taken_paths:
            notes.append(f"volume {mount['name']} is not mounted at {mount['mountPath']} in "
                         "the JobSet's pods: the compute profile mounts something there")
            continue
        mounts.append(mount)
        taken_paths.add(mount["mountPath"])
    if not volumes:
        pod.pop("volumes")
    if not mounts:
        container.pop("volumeMounts")
    return notes
