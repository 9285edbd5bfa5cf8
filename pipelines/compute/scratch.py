"""Local disk for a GKE step: ``ephemeral_storage`` as a sized generic ephemeral volume.

kfp 2.17's pipeline spec carries no ephemeral-storage request, so a step cannot ask the
scheduler for node-local disk. kfp-kubernetes can give it a *generic ephemeral volume*
(``kubernetes.add_ephemeral_volume``): a PersistentVolumeClaim created with the pod, of the
requested size, from the cluster's default StorageClass (a Persistent Disk on GKE, Standard
and Autopilot), deleted with the pod. It is mounted where the disk is used: the KFP
launcher's staging directory for the default in-cluster artifact store (``/minio/...``, the
local path the launcher downloads input artifacts to and uploads output artifacts from), so
the staged artifacts land on the sized volume instead of the node's boot disk.

With a ``gs://`` pipeline root or a ``shard_root`` the prepared shards bypass the artifact
store (``components/prepare/shard_store.py``): no step stages the dataset, and the default
profiles need no volume. On Vertex AI artifacts are read through the ``/gcs`` mount and
nothing is staged; ``ephemeral_storage`` is not applied there.
"""

from __future__ import annotations

from gkeflow.pipelines.settings.platforms import platform

#: Name of the volume in the pod spec.
STAGING_VOLUME = "artifact-staging"
#: Where the KFP launcher stages artifacts of a ``minio://`` pipeline root (the default root
#: of an open-source Kubeflow Pipelines install on GKE).
STAGING_PATH = "/minio"


def apply_gke_disk(task, profile) -> None:
    """Mount a generic ephemeral volume of ``profile.ephemeral_storage`` on a GKE step."""
    if not profile.ephemeral_storage:
        return
    from kfp import kubernetes

    kubernetes.add_ephemeral_volume(
        task, volume_name=STAGING_VOLUME, mount_path=STAGING_PATH,
        access_modes=["ReadWriteOnce"], size=profile.ephemeral_storage,
    )


def describe_disk(profile, target: str) -> str:
    """The disk column of ``gkeflow plan``."""
    if not profile.ephemeral_storage:
        return "-"
    if platform(target).kubernetes:
        return f"{profile.ephemeral_storage} volume at {STAGING_PATH}"
    return f"not applied ({profile.ephemeral_storage})"
