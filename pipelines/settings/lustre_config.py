"""gkeflow.yaml's ``lustre:`` section: existing Google Cloud Managed Lustre instances mounted
into the steps that read or write under them (how pipelines mount them:
:mod:`gkeflow.pipelines.compute.lustre`)::

    lustre:
      instances:
        - name: training-fs              # the Managed Lustre instance
          project: my-project
          location: us-central1-a        # its zone
          ip: 10.90.1.4                  # the IP of its mount point (IP@tcp:/FILESYSTEM)
          filesystem: lfs                # its file system name
          use: [data, shards, checkpoints]
          # mount_path: /lustre/training-fs   read_only: false   claim: lustre-training-fs
          # capacity: 18000Gi

Steps then read and write plain paths under ``mount_path`` (``--data
/lustre/training-fs/sales/*.parquet``, ``shard_root``, ``checkpoint_uri``).
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from gkeflow.pipelines.settings.gcsfuse_config import (
    WRITING_USES,
    Use,
    check_mount_paths,
    overlap,
)
from gkeflow.pipelines.settings.workspace_config import quantity_bytes

_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_PROJECT = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
_FILESYSTEM = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,7}$")


class LustreInstance(BaseModel):
    """One existing Managed Lustre instance, statically provisioned as a PersistentVolume
    of GKE's Managed Lustre CSI driver.

    Attributes:
        name: The instance's name.
        project: Its project.
        location: Its zone (Managed Lustre instances are zonal).
        ip: The IP address of its mount point (``gcloud lustre instances describe``).
        filesystem: Its file system name (up to 8 letters and digits).
        mount_path: Where steps see it; default ``/lustre/<name>``.
        read_only: Mount read-only (refused for ``shards`` and ``checkpoints``).
        use: What it serves: ``data``, ``shards``, ``checkpoints``.
        claim: The PersistentVolumeClaim bound to it; default ``lustre-<name>``.
        capacity: The PersistentVolume's capacity (the instance's size; the binder needs
            the claim to fit it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    project: str
    location: str
    ip: str
    filesystem: str
    mount_path: str = ""
    read_only: bool = False
    use: tuple[Use, ...] = ("data",)
    claim: str = ""
    capacity: str = "18000Gi"

    @field_validator("name", "claim")
    @classmethod
    def _name(cls, value: str) -> str:
        if value and not _NAME.match(value):
            raise ValueError("not a valid name: up to 63 lowercase letters, "
                             "digits and '-', starting with a letter")
        return value

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if not _PROJECT.match(value):
            raise ValueError("not a Google Cloud project id (6-30 "
                             "lowercase letters, digits and '-', starting with a letter)")
        return value

    @field_validator("location")
    @classmethod
    def _location(cls, value: str) -> str:
        if not _ZONE.match(value):
            raise ValueError("not a zone (e.g. us-central1-a): "
                             "Managed Lustre instances are zonal")
        return value

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: str) -> str:
        try:
            address = ipaddress.ip_address(value.strip())
        except ValueError:
            raise ValueError("not an IP address; give the address before "
                             "'@tcp' in the instance's mount point") from None
        if address.version != 4:
            raise ValueError("the Managed Lustre CSI driver takes an IPv4 "
                             "address")
        return str(address)

    @field_validator("filesystem")
    @classmethod
    def _filesystem(cls, value: str) -> str:
        if not _FILESYSTEM.match(value):
            raise ValueError("not a Managed Lustre file system name "
                             "(up to 8 letters and digits, starting with a letter)")
        return value

    @field_validator("mount_path")
    @classmethod
    def _mount_path(cls, value: str) -> str:
        if value and (not value.startswith("/") or value.strip() != value or value == "/"):
            raise ValueError("must be an absolute directory other "
                             "than / (e.g. /lustre)")
        return posixpath.normpath(value) if value else value

    @field_validator("use")
    @classmethod
    def _use(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("use must name at least one of data, shards, checkpoints")
        return tuple(dict.fromkeys(value))

    @field_validator("capacity")
    @classmethod
    def _capacity(cls, value: str) -> str:
        quantity_bytes(value)
        return value

    @model_validator(mode="after")
    def _writable(self):
        writes = [use for use in self.use if use in WRITING_USES]
        if self.read_only and writes:
            raise ValueError(f"lustre instance {self.name} is read_only but holds "
                             f"{' and '.join(writes)}, which steps write: set read_only: "
                             "false or use it for data only")
        return self

    @property
    def path(self) -> str:
        return self.mount_path or f"/lustre/{self.name}"

    @property
    def claim_name(self) -> str:
        """The PersistentVolumeClaim (the PersistentVolume is ``gkeflow-<claim>``)."""
        return self.claim or f"lustre-{self.name}"[:63].rstrip("-")

    @property
    def volume_handle(self) -> str:
        """``PROJECT/LOCATION/INSTANCE``, as the CSI driver's PersistentVolumes name it."""
        return f"{self.project}/{self.location}/{self.name}"


class LustreSettings(BaseModel):
    """``lustre:`` in gkeflow.yaml: Managed Lustre instances mounted into the steps that
    use them (GKE only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instances: tuple[LustreInstance, ...] = ()

    @model_validator(mode="after")
    def _distinct(self):
        claims = [instance.claim_name for instance in self.instances]
        twice = next((c for c in claims if claims.count(c) > 1), "")
        if twice:
            raise ValueError(f"lustre claim {twice} is listed twice; list each instance "
                             "once with every use")
        check_mount_paths([(i.path, i.name) for i in self.instances])
        return self

    def overlapping(self, paths: dict[str, str]) -> str:
        """One line when an instance's mount path overlaps one of ``paths`` (path -> what
        is mounted there, e.g. a gcsfuse bucket); else ""."""
        for instance in self.instances:
            for path, what in paths.items():
                if overlap(instance.path, path):
                    return (f"lustre instance {instance.name} at {instance.path} overlaps "
                            f"{what} at {path}: give each its own directory")
        return ""
