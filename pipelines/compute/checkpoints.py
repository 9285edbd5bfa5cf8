"""The run's checkpoint volume on GKE: a PersistentVolumeClaim per run, through kfp-kubernetes.

Open-source Kubeflow Pipelines stores artifacts in its in-cluster MinIO (``minio://``),
which the training step cannot write checkpoints to as files, and a ``gs://`` root is not
mounted in the pod. So the GKE pipeline creates one PVC per run (``CreatePVC``, named
after the run's Argo workflow), mounts it in the training step at
:data:`~gkeflow.components.train.store.CHECKPOINT_MOUNT`, where the step finds it on every
retry of the run, and deletes it once training has succeeded. Vertex AI pipeline roots are
``gs://``, written directly with the Cloud Storage client, so Vertex gets no volume.
"""

from __future__ import annotations

from kfp import dsl

from gkeflow.components.train.store import CHECKPOINT_MOUNT

#: GKE's default balanced persistent-disk StorageClass (every GKE cluster has it). A zonal
#: ReadWriteOnce disk: a retried pod is scheduled in the disk's zone.
STORAGE_CLASS = "standard-rwo"
#: Room for a few checkpoints of the model and optimizer state (two are kept at most).
VOLUME_SIZE = "20Gi"


def add_checkpoint_volume(train: dsl.PipelineTask, size: str = VOLUME_SIZE,
                          storage_class: str = STORAGE_CLASS, step: str = "") -> dsl.PipelineTask:
    """Create a run-scoped PVC, mount it in ``train`` and delete it after ``train``; with
    ``step``, a volume of that step's own (steps training side by side, on several nodes,
    cannot share one ReadWriteOnce disk).

    Returns:
        The task that deletes the volume.
    """
    from kfp import kubernetes

    volume = kubernetes.CreatePVC(
        pvc_name_suffix="-gkeflow-checkpoints" + (f"-{step}" if step else ""),
        access_modes=["ReadWriteOnce"],
        size=size,
        storage_class_name=storage_class,
    ).set_display_name("Create checkpoint volume")
    volume.set_caching_options(False)
    kubernetes.mount_pvc(train, pvc_name=volume.outputs["name"], mount_path=CHECKPOINT_MOUNT)
    delete = kubernetes.DeletePVC(pvc_name=volume.outputs["name"]).after(train)
    delete.set_display_name("Delete checkpoint volume")
    delete.set_caching_options(False)
    return delete
