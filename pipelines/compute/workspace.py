"""The run's workspace on GKE: where shards and checkpoints live when the root is not gs://.

Open-source Kubeflow Pipelines stores artifacts in its in-cluster MinIO (``minio://``) and its
launcher copies every input artifact to the pod's disk before a step starts. A prepared
dataset kept inside its artifact would therefore be staged whole, on every step that reads
it. With a ``gs://`` pipeline root the shards go to Cloud Storage next to the artifact and
are streamed (see :mod:`gkeflow.components.prepare.shard_store`); on any other root the GKE
pipeline asks KFP for a *workspace* (``dsl.PipelineConfig(workspace=...)``, KFP >= 2.14): one
PersistentVolumeClaim per run, mounted at ``/kfp-workspace`` in exactly the steps that take
:data:`kfp.dsl.WORKSPACE_PATH_PLACEHOLDER` (prepare, train, evaluate). Preparation writes the
shards there and only their manifest (``shards.json``) passes through MinIO; training streams
them and keeps its resumable checkpoints there too; KFP deletes the volume when the run
succeeds, and a failed run keeps it for its retry.

Vertex AI and local runs take no workspace: their pipeline roots are ``gs://`` or a local
directory, which the same code path writes shards next to. The ``workspace:`` settings are
modelled in :mod:`gkeflow.pipelines.settings.workspace_config`.
"""

from __future__ import annotations

from gkeflow.pipelines.settings.workspace_config import WorkspaceSettings

#: Where KFP mounts the workspace in a pod (kfp.dsl.constants.WORKSPACE_MOUNT_PATH).
WORKSPACE_MOUNT = "/kfp-workspace"

DEFAULT_WORKSPACE = WorkspaceSettings()


def pipeline_config(settings: WorkspaceSettings):
    """The ``dsl.PipelineConfig`` that asks KFP for this workspace."""
    from kfp import dsl

    return dsl.PipelineConfig(workspace=dsl.WorkspaceConfig(
        size=settings.size,
        kubernetes=dsl.KubernetesWorkspaceConfig(pvcSpecPatch={
            "storageClassName": settings.storage_class,
            "accessModes": [settings.access_mode],
        }),
    ))


def parallel_note(settings: WorkspaceSettings, what: str, parallelism: int) -> str:
    """A note when ``parallelism`` steps would share a single-node workspace; else ""."""
    if parallelism <= 1 or settings.shared_by_nodes():
        return ""
    return (f"{what} run {parallelism} at a time but the workspace is ReadWriteOnce: pods on "
            "different nodes wait for each other. Set workspace.access_mode: ReadWriteMany "
            "with a shared StorageClass (e.g. standard-rwx, Filestore CSI) or use a gs:// "
            "pipeline root.")


class PipelineStorage:
    """What one pipeline build passes its steps: the workspace path or nothing."""

    def __init__(self, target: str, settings: WorkspaceSettings | None = None,
                 pipeline_root: str | None = None, jobset: bool = False):
        """``jobset``: training runs as a GKE JobSet, whose pods read the shards and write
        the model through a gs:// pipeline root, not the workspace (which only pipeline
        steps mount): then the workspace stays off unless asked for, and asking is an error.

        Raises:
            ValueError: the workspace is enabled for a pipeline that trains in a JobSet.
        """
        self.settings = settings or DEFAULT_WORKSPACE
        if jobset and self.settings.enabled:
            raise ValueError(
                "train-model.replicas > 1 on GKE trains in a JobSet, whose pods move data "
                "through a gs:// pipeline root, not the workspace: set workspace.enabled: "
                "false and targets.gke.pipeline_root: gs://BUCKET/PATH")
        root = self.settings.pipeline_root
        if jobset and root is not None and not self.settings.gcs_root:
            raise ValueError(
                "train-model.replicas > 1 on GKE trains in a JobSet, whose pods read the "
                f"shards and publish the model through a gs:// pipeline root, and "
                f"targets.gke.pipeline_root is {root}: set it to gs://BUCKET/PATH")
        self.active = not jobset and self.settings.active(target, pipeline_root)

    @property
    def checkpoint_volume(self) -> bool:
        """Whether a GKE training step needs the per-run checkpoint volume: no workspace
        and no gs:// root to keep checkpoints in."""
        return not self.active and not self.settings.gcs_root

    @property
    def path(self) -> str:
        """The ``workspace_path`` argument of prepare, train and evaluate steps."""
        from kfp import dsl

        return dsl.WORKSPACE_PATH_PLACEHOLDER if self.active else ""

    def config(self):
        """``pipeline_config=`` for ``@dsl.pipeline``: the workspace, or None."""
        return pipeline_config(self.settings) if self.active else None
