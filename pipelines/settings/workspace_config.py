"""gkeflow.yaml's ``workspace:`` section: the run's volume on GKE when the pipeline root is
not gs:// (how pipelines use it: :mod:`gkeflow.pipelines.compute.workspace`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator

from gkeflow.pipelines.settings.platforms import platform

#: Access modes a workspace may ask for. ReadWriteOnce disks attach to one node at a time, so
#: steps that use the workspace in parallel (sweep trials, fan-out groups) then take turns.
ACCESS_MODES = ("ReadWriteOnce", "ReadWriteMany")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|K|M|G|T|P)?$")
_BYTES = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_STORAGE_CLASS = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def quantity_bytes(value: str) -> int:
    """Bytes of a Kubernetes storage quantity such as ``200Gi``."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError("not a storage quantity (e.g. 200Gi or 500G)")
    number = value.strip()[: len(value.strip()) - len(match.group(2) or "")]
    return int(float(number) * _BYTES[match.group(2) or ""])


class WorkspaceSettings(BaseModel):
    """``workspace:`` in gkeflow.yaml: the run's volume on GKE when the root is not gs://.

    Attributes:
        enabled: ``true``/``false``; unset: on for a GKE pipeline root that is not gs://
            (e.g. KFP's default MinIO), off for a gs:// root (shards go to Cloud Storage).
        size: The volume's size; room for the prepared shards (about the input's size
            compressed) plus checkpoints.
        storage_class: StorageClass of the volume; ``standard-rwo`` (balanced persistent
            disk) exists on every GKE cluster, ``standard-rwx`` (Filestore) lets parallel
            steps on several nodes share it.
        access_mode: ReadWriteOnce or ReadWriteMany (needed for parallel steps on several
            nodes: sweep trials, fan-out groups).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = None
    size: str = "100Gi"
    #: Set by :meth:`GkeflowConfig.gke_workspace` from targets.gke.pipeline_root: a gs://
    #: root holds checkpoints itself, so no checkpoint volume is needed either.
    _gcs_root: bool = PrivateAttr(default=False)
    _pipeline_root: str | None = PrivateAttr(default=None)
    storage_class: str = "standard-rwo"
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = "ReadWriteOnce"

    @field_validator("size")
    @classmethod
    def _size(cls, value: str) -> str:
        if quantity_bytes(value) < 2**30:
            raise ValueError("under 1Gi; size the workspace for the prepared "
                             "shards plus checkpoints (e.g. 200Gi)")
        return value.strip()

    @field_validator("storage_class")
    @classmethod
    def _storage_class(cls, value: str) -> str:
        if not _STORAGE_CLASS.match(value):
            raise ValueError("not a StorageClass name (e.g. standard-rwo, "
                             "standard-rwx, premium-rwo)")
        return value

    def active(self, target: str, pipeline_root: str | None = None) -> bool:
        """Whether a pipeline built for ``target`` with ``pipeline_root`` uses it: on GKE
        unless disabled (by default, unless the root is gs://); a local run only when
        enabled explicitly (kfp.local's workspace directory); never on Vertex AI, whose
        roots are gs://."""
        if platform(target).local:
            return bool(self.enabled)
        if not platform(target).kubernetes:
            return False
        if self.enabled is not None:
            return self.enabled
        return not (pipeline_root or "").startswith("gs://")

    def shared_by_nodes(self) -> bool:
        return self.access_mode == "ReadWriteMany"

    def for_root(self, pipeline_root: str | None) -> WorkspaceSettings:
        """These settings for a GKE ``pipeline_root``: unset ``enabled`` becomes off for a
        gs:// root, which then also holds the checkpoints."""
        gcs = (pipeline_root or "").startswith("gs://")
        settings = self.model_copy(update={"enabled": False}) if (
            gcs and self.enabled is None) else self.model_copy()
        settings._gcs_root = gcs
        settings._pipeline_root = pipeline_root
        return settings

    @property
    def gcs_root(self) -> bool:
        return self._gcs_root

    @property
    def pipeline_root(self) -> str | None:
        """The GKE target's pipeline root these settings were made for (None: not known
        here, e.g. KFP's default root)."""
        return self._pipeline_root
