"""Cloud Storage buckets mounted into the steps that read or write under them.

On GKE, through the Cloud Storage FUSE CSI driver (``gcsfuse.csi.storage.gke.io``).
kfp-kubernetes 2.17 cannot declare an inline CSI volume (its ``KubernetesExecutorConfig``
mounts PVCs, generic ephemeral volumes, secrets, config maps and emptyDirs only), so each
bucket is a statically provisioned PersistentVolume of that driver (``volumeHandle`` = the
bucket, ``mountOptions``, ``readOnly``) bound to a PersistentVolumeClaim, which
:func:`apply_gcsfuse` mounts with ``kubernetes.mount_pvc``; GKE's docs describe the same
route. :func:`manifests` writes the PV and PVC (apply them once per namespace). The pod
annotation ``gke-gcsfuse/volumes: "true"`` makes GKE inject the gcsfuse sidecar, and
``gke-gcsfuse/{cpu,memory,ephemeral-storage}-limit`` size it.

On Vertex AI every bucket is already mounted at ``/gcs/<bucket>``: the steps get only
:data:`~gkeflow.components.cloud.mounts.MOUNTS_ENV`, which makes them read ``gs://`` URIs
of those buckets through ``/gcs/``. Local runs read ``gs://`` by reference.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gkeflow.components.cloud.mounts import MOUNTS_ENV, READ_ONLY_ENV
from gkeflow.pipelines.gcsfuse_config import GcsFuseBucket, GcsFuseSettings

DRIVER = "gcsfuse.csi.storage.gke.io"
#: The user and group gkeflow's images run steps as (images/*.Dockerfile ``USER``): the
#: bucket's files are mounted as theirs unless the options say ``uid``/``gid`` themselves,
#: else a non-root step cannot write shards or checkpoints there.
IMAGE_UID = IMAGE_GID = 10001
VOLUMES_ANNOTATION = "gke-gcsfuse/volumes"
#: Step -> what it reads or writes under a bucket: the data (``data_uri``), the prepared
#: shards, the checkpoints (``checkpoint_uri``).
STEP_USES: Mapping[str, tuple[str, ...]] = {
    "fingerprint-data": ("data",),
    "prepare-data": ("data", "shards"),
    "plan-prepare": ("data",),
    "prepare-group": ("data", "shards"),
    "merge-prepared": ("shards",),
    "train-model": ("shards", "checkpoints"),
    "evaluate-model": ("shards",),
}


def step_buckets(settings: GcsFuseSettings, step: str) -> tuple[GcsFuseBucket, ...]:
    """The buckets ``step`` mounts: those serving something it reads or writes."""
    uses = STEP_USES.get(step, ())
    return tuple(b for b in settings.buckets if any(use in b.use for use in uses))


def step_mounts(settings: GcsFuseSettings, step: str, target: str) -> dict[str, str]:
    """Bucket -> where ``step`` sees it on ``target`` (empty: it mounts none)."""
    if target not in ("gke", "vertex"):
        return {}
    return {b.bucket: (b.path if target == "gke" else f"/gcs/{b.bucket}")
            for b in step_buckets(settings, step)}


def apply_gcsfuse(task, step: str, settings: GcsFuseSettings | None, target: str):
    """Mount ``step``'s buckets in ``task`` for ``target`` (see the module docstring)."""
    mounted = step_mounts(settings, step, target) if settings else {}
    if not mounted:
        return task
    if target == "gke":
        from kfp import kubernetes

        kubernetes.add_pod_annotation(task, VOLUMES_ANNOTATION, "true")
        for key, value in settings.sidecar.annotations().items():
            kubernetes.add_pod_annotation(task, key, value)
        for bucket in step_buckets(settings, step):
            kubernetes.mount_pvc(task, pvc_name=bucket.claim_name, mount_path=bucket.path)
    task.set_env_variable(MOUNTS_ENV, json.dumps(mounted, sort_keys=True))
    read_only = [b.bucket for b in step_buckets(settings, step) if b.read_only]
    if read_only:
        task.set_env_variable(READ_ONLY_ENV, ",".join(read_only))
    return task


def check_engine(settings: GcsFuseSettings | None, target: str, engine: bool) -> str:
    """One line when buckets for shards or checkpoints meet GKE JobSet training (its pods
    are not pipeline steps and mount nothing); else ""."""
    if not settings or target != "gke" or not engine:
        return ""
    used = [b.bucket for b in settings.buckets if {"shards", "checkpoints"} & set(b.use)]
    if not used:
        return ""
    return (f"gcsfuse bucket {', '.join(used)} holds shards or checkpoints, but "
            "train-model.replicas > 1 on GKE trains in a JobSet whose pods mount no bucket: "
            "use it for data only or train in one pod")


def _with_owner(options: tuple[str, ...]) -> list[str]:
    keys = {option.split("=", 1)[0] for option in options}
    owner = [f"{key}={value}" for key, value in (("uid", IMAGE_UID), ("gid", IMAGE_GID))
             if key not in keys]
    return [*options, *owner]


def manifests(settings: GcsFuseSettings, namespace: str = "kubeflow",
              capacity: str = "1Ti") -> list[dict]:
    """The PersistentVolume and PersistentVolumeClaim of each bucket, for ``namespace``
    (where the pipeline's pods run; its service account needs access to the bucket
    through Workload Identity Federation for GKE)."""
    documents: list[dict] = []
    for bucket in settings.buckets:
        claim, volume = bucket.claim_name, f"gkeflow-{bucket.claim_name}"[:63].rstrip("-")
        access = "ReadOnlyMany" if bucket.read_only else "ReadWriteMany"
        csi = {"driver": DRIVER, "volumeHandle": bucket.bucket}
        if bucket.read_only:
            csi["readOnly"] = True
        documents.append({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {"app.kubernetes.io/managed-by": "gkeflow"}},
            "spec": {
                "accessModes": [access], "capacity": {"storage": capacity},
                "storageClassName": "gcsfuse-static", "persistentVolumeReclaimPolicy": "Retain",
                "mountOptions": _with_owner(bucket.mount_options), "csi": csi,
                "claimRef": {"name": claim, "namespace": namespace},
            },
        })
        documents.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {"accessModes": [access], "resources": {"requests": {"storage": capacity}},
                     "storageClassName": "gcsfuse-static", "volumeName": volume},
        })
    return documents


def main(argv: list[str] | None = None) -> int:
    """Print the PV and PVC manifests of gkeflow.yaml's ``gcsfuse:`` buckets."""
    import argparse
    import sys

    import yaml

    from gkeflow.pipelines.config import load_config

    parser = argparse.ArgumentParser(prog="python -m gkeflow.pipelines.compute.gcsfuse",
                                     description=main.__doc__)
    parser.add_argument("--config", default=None, help="gkeflow.yaml (default: ./gkeflow.yaml)")
    parser.add_argument("--namespace", default="kubeflow", help="where the pipeline pods run")
    args = parser.parse_args(argv)
    try:
        settings = load_config(args.config).gcsfuse
    except Exception as exc:  # a config problem: one line, no traceback
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    if not settings.buckets:
        print("error: gkeflow.yaml has no gcsfuse.buckets; add one (docs/storage.md)",
              file=sys.stderr)
        return 2
    print(yaml.safe_dump_all(manifests(settings, args.namespace), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
