"""Managed Lustre instances mounted into the steps that read or write under them.

On GKE, through GKE's Managed Lustre CSI driver (``lustre.csi.storage.gke.io``): as for
Cloud Storage FUSE (:mod:`~gkeflow.pipelines.compute.gcsfuse`), kfp-kubernetes mounts only
PersistentVolumeClaims, so each existing instance is a statically provisioned
PersistentVolume of the driver (``volumeHandle`` ``PROJECT/LOCATION/INSTANCE``,
``volumeAttributes`` ``ip`` and ``filesystem``) bound to a claim, which
:func:`apply_lustre` mounts in exactly the steps whose uses the instance serves
(:data:`~gkeflow.pipelines.compute.gcsfuse.STEP_USES`). :func:`manifests` writes the PV and
PVC (apply them once per namespace). The nodes need the driver enabled on the cluster
(``--enable-lustre-csi-driver``), Container-Optimized OS with containerd and a GKE version
the driver supports (docs/storage.md).

On Vertex AI, Managed Lustre reaches only CustomJobs (``WorkerPoolSpec.lustre_mounts``), not
pipeline steps: a pipeline compiled for Vertex AI with ``lustre:`` instances is refused in
one line (:func:`check_target`). Local runs read the paths as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gkeflow.pipelines.compute.gcsfuse import STEP_USES, StepMount, print_manifests
from gkeflow.pipelines.settings.lustre_config import LustreInstance, LustreSettings
from gkeflow.pipelines.settings.platforms import platform

DRIVER = "lustre.csi.storage.gke.io"


def step_instances(settings: LustreSettings | None, step: str) -> tuple[LustreInstance, ...]:
    """The instances ``step`` mounts: those serving something it reads or writes."""
    if not settings:
        return ()
    uses = STEP_USES.get(step, ())
    return tuple(i for i in settings.instances if any(use in i.use for use in uses))


def check_target(settings: LustreSettings | None, target: str) -> str:
    """One line when ``lustre:`` instances meet a target that cannot mount them; else ""."""
    if not settings or not settings.instances or not platform(target).managed:
        return ""
    names = ", ".join(i.name for i in settings.instances)
    return (f"lustre instance {names}: Vertex AI mounts Managed Lustre only in CustomJobs "
            "(lustre_mounts), not in pipeline steps; compile for --target gke, or drop "
            "lustre: for Vertex AI")


def check_engine(settings: LustreSettings | None, target: str, engine: bool) -> str:
    """One line when instances for shards or checkpoints meet GKE JobSet training (its pods
    are not pipeline steps and mount no claim); else ""."""
    if not settings or not platform(target).kubernetes or not engine:
        return ""
    used = [i.name for i in settings.instances if {"shards", "checkpoints"} & set(i.use)]
    if not used:
        return ""
    return (f"lustre instance {', '.join(used)} holds shards or checkpoints, but "
            "train-model.replicas > 1 on GKE trains in a JobSet whose pods mount no claim: "
            "use it for data only or train in one pod")


def mount_list(settings: LustreSettings | None, step: str, target: str
               ) -> tuple[StepMount, ...]:
    """``step``'s Lustre mounts on GKE (empty elsewhere, or when it mounts none)."""
    if not platform(target).kubernetes:
        return ()
    return tuple(StepMount(i.name, i.path, i.read_only, i.claim_name)
                 for i in step_instances(settings, step))


def apply_lustre(task, step: str, settings: LustreSettings | None, target: str):
    """Mount ``step``'s instances in ``task`` on GKE (see the module docstring)."""
    if not platform(target).kubernetes:
        return task
    from kfp import kubernetes

    for instance in step_instances(settings, step):
        kubernetes.mount_pvc(task, pvc_name=instance.claim_name, mount_path=instance.path)
    return task


def plan_mounts(settings: LustreSettings | None, steps: Iterable[str], target: str,
                unmounted: Iterable[str] = ()) -> dict[str, tuple[StepMount, ...]]:
    """Step -> its Lustre mounts, for the steps that mount any."""
    skip = set(unmounted)
    found = {step: mount_list(settings, step, target) for step in steps if step not in skip}
    return {step: mounts for step, mounts in found.items() if mounts}


def plan_lines(mounts: Mapping[str, tuple[StepMount, ...]]) -> list[str]:
    """What `gkeflow plan` says of each step's Lustre instances."""
    if not mounts:
        return []
    lines = []
    for step, mounted in mounts.items():
        shown = ", ".join(f"{m.bucket} at {m.path} "
                          f"({'read-only' if m.read_only else 'read-write'}, claim {m.claim})"
                          for m in mounted)
        lines.append(f"lustre: {step}: {shown}")
    lines.append(f"lustre: each instance is a PersistentVolume and claim of the CSI driver "
                 f"{DRIVER}, applied once per namespace (python -m "
                 "gkeflow.pipelines.compute.lustre | kubectl apply -f -); the nodes need the "
                 "driver enabled and Container-Optimized OS")
    return lines


def manifests(settings: LustreSettings, namespace: str = "kubeflow") -> list[dict]:
    """The PersistentVolume and PersistentVolumeClaim of each instance, for ``namespace``
    (where the pipeline's pods run)."""
    documents: list[dict] = []
    for instance in settings.instances:
        claim = instance.claim_name
        volume = f"gkeflow-{claim}"[:63].rstrip("-")
        access = "ReadOnlyMany" if instance.read_only else "ReadWriteMany"
        csi = {"driver": DRIVER, "volumeHandle": instance.volume_handle,
               "volumeAttributes": {"ip": instance.ip, "filesystem": instance.filesystem}}
        if instance.read_only:
            csi["readOnly"] = True
        documents.append({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {"app.kubernetes.io/managed-by": "gkeflow"}},
            "spec": {
                "accessModes": [access], "capacity": {"storage": instance.capacity},
                "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                "volumeMode": "Filesystem", "csi": csi,
                "claimRef": {"name": claim, "namespace": namespace},
            },
        })
        documents.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {"accessModes": [access],
                     "resources": {"requests": {"storage": instance.capacity}},
                     "storageClassName": "", "volumeName": volume},
        })
    return documents


def main(argv: list[str] | None = None) -> int:
    """Print the PV and PVC manifests of gkeflow.yaml's ``lustre:`` instances."""
    return print_manifests(argv, "python -m gkeflow.pipelines.compute.lustre", "lustre",
                           "gkeflow.yaml has no lustre.instances; add one (docs/storage.md)",
                           manifests)


if __name__ == "__main__":
    raise SystemExit(main())
