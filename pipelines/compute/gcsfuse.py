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
of those buckets through ``/gcs/`` (a training CustomJob's replicas get it too:
:func:`mount_env`). Local runs read ``gs://`` by reference.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gkeflow.components.cloud.mounts import MOUNTS_ENV, READ_ONLY_ENV
from gkeflow.pipelines.settings.gcsfuse_config import GcsFuseBucket, GcsFuseSettings
from gkeflow.pipelines.settings.platforms import platform

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
    # batch scoring reads the rows through the mount; its predictions file is published by
    # one upload (an object appears whole), never through a read-only mount
    "predict-batch": ("data",),
}


@dataclass(frozen=True)
class StepMount:
    """A bucket as a step sees it: where, whether read-only, and the GKE claim behind it
    (empty on Vertex AI, which mounts every bucket at ``/gcs/`` itself)."""

    bucket: str
    path: str
    read_only: bool
    claim: str = ""

    def as_json(self) -> dict:
        return {"bucket": self.bucket, "path": self.path, "read_only": self.read_only,
                "claim": self.claim}

    def describe(self) -> str:
        mode = "read-only" if self.read_only else "read-write"
        claim = f", claim {self.claim}" if self.claim else ""
        return f"gs://{self.bucket} at {self.path} ({mode}{claim})"


def step_buckets(settings: GcsFuseSettings, step: str) -> tuple[GcsFuseBucket, ...]:
    """The buckets ``step`` mounts: those serving something it reads or writes."""
    uses = STEP_USES.get(step, ())
    return tuple(b for b in settings.buckets if any(use in b.use for use in uses))


def mount_list(settings: GcsFuseSettings | None, step: str,
               target: str) -> tuple[StepMount, ...]:
    """``step``'s mounts on ``target`` (empty: it mounts none)."""
    if not settings or not platform(target).cloud:
        return ()
    return tuple(StepMount(b.bucket, b.path if platform(target).kubernetes else f"/gcs/{b.bucket}",
                           b.read_only, b.claim_name if platform(target).kubernetes else "")
                 for b in step_buckets(settings, step))


def mount_env(settings: GcsFuseSettings | None, step: str, target: str) -> dict[str, str]:
    """The environment that makes ``step``'s code read ``gs://`` of its buckets through
    their mounts and refuse writes to read-only ones (empty: it mounts none)."""
    mounted = mount_list(settings, step, target)
    if not mounted:
        return {}
    env = {MOUNTS_ENV: json.dumps({m.bucket: m.path for m in mounted}, sort_keys=True)}
    read_only = [m.bucket for m in mounted if m.read_only]
    if read_only:
        env[READ_ONLY_ENV] = ",".join(read_only)
    return env


def plan_mounts(settings: GcsFuseSettings | None, steps: Iterable[str], target: str,
                unmounted: Iterable[str] = ()) -> dict[str, tuple[StepMount, ...]]:
    """Step -> its mounts, for the steps that mount any; ``unmounted`` steps (a GKE JobSet
    launcher: its pods mount nothing) are left out."""
    skip = set(unmounted)
    found = {step: mount_list(settings, step, target) for step in steps if step not in skip}
    return {step: mounts for step, mounts in found.items() if mounts}


def plan_lines(mounts: Mapping[str, tuple[StepMount, ...]], target: str,
               custom_job_steps: Iterable[str] = ()) -> list[str]:
    """What `gkeflow plan` says of each step's buckets."""
    if not mounts:
        return []
    jobs = set(custom_job_steps)
    lines = []
    for step, mounted in mounts.items():
        where = " (in its CustomJob)" if step in jobs else ""
        lines.append(f"gcsfuse: {step}{where}: "
                     f"{', '.join(m.describe() for m in mounted)}")
    if platform(target).kubernetes:
        lines.append("gcsfuse: each bucket is a PersistentVolume and claim of the CSI driver "
                     f"{DRIVER}, applied once per namespace "
                     "(python -m gkeflow.pipelines.compute.gcsfuse | kubectl apply -f -)")
    else:
        lines.append("gcsfuse: Vertex AI mounts Cloud Storage at /gcs/ itself: no volume")
    return lines


def apply_gcsfuse(task, step: str, settings: GcsFuseSettings | None, target: str):
    """Mount ``step``'s buckets in ``task`` for ``target`` (see the module docstring)."""
    env = mount_env(settings, step, target)
    if not env:
        return task
    if platform(target).kubernetes:
        from kfp import kubernetes

        kubernetes.add_pod_annotation(task, VOLUMES_ANNOTATION, "true")
        for key, value in settings.sidecar.annotations().items():
            kubernetes.add_pod_annotation(task, key, value)
        for bucket in step_buckets(settings, step):
            kubernetes.mount_pvc(task, pvc_name=bucket.claim_name, mount_path=bucket.path)
    for name, value in env.items():
        task.set_env_variable(name, value)
    return task


def check_engine(settings: GcsFuseSettings | None, target: str, engine: bool) -> str:
    """One line when buckets for shards or checkpoints meet GKE JobSet training (its pods
    are not pipeline steps and mount nothing); else ""."""
    if not settings or not platform(target).kubernetes or not engine:
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


def print_manifests(argv: list[str] | None, prog: str, section: str, empty: str,
                    build) -> int:
    """The command behind ``python -m`` of a volume module: load gkeflow.yaml, take its
    ``section`` and print ``build(settings, namespace)`` as YAML documents; a config
    problem or an ``empty`` section is one line on standard error and exit 2."""
    import argparse
    import sys

    import yaml

    from gkeflow.pipelines.settings.config import load_config

    parser = argparse.ArgumentParser(prog=prog, description=f"Print the PV and PVC manifests "
                                                            f"of gkeflow.yaml's {section}:.")
    parser.add_argument("--config", default=None, help="gkeflow.yaml (default: ./gkeflow.yaml)")
    parser.add_argument("--namespace", default="kubeflow", help="where the pipeline pods run")
    args = parser.parse_args(argv)
    try:
        settings = getattr(load_config(args.config), section)
    except Exception as exc:  # a config problem: one line, no traceback
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    documents = build(settings, args.namespace)
    if not documents:
        print(f"error: {empty}", file=sys.stderr)
        return 2
    print(yaml.safe_dump_all(documents, sort_keys=False), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Print the PV and PVC manifests of gkeflow.yaml's ``gcsfuse:`` buckets."""
    return print_manifests(argv, "python -m gkeflow.pipelines.compute.gcsfuse", "gcsfuse",
                           "gkeflow.yaml has no gcsfuse.buckets; add one (docs/storage.md)",
                           manifests)


if __name__ == "__main__":
    raise SystemExit(main())
