"""gkeflow.yaml's ``gcsfuse:`` section: Cloud Storage buckets mounted into steps (how
pipelines mount them: :mod:`gkeflow.pipelines.compute.gcsfuse`)."""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gkeflow.components.did_you_mean import did_you_mean
from gkeflow.pipelines.settings.workspace_config import quantity_bytes

#: What a bucket serves: ``data`` (data_uri, read by fingerprint and prepare steps),
#: ``shards`` (written by prepare, read by train and evaluate), ``checkpoints`` (train).
Use = Literal["data", "shards", "checkpoints"]
#: Uses that write to the bucket: refused for a bucket mounted read-only.
WRITING_USES = ("shards", "checkpoints")

#: Mount options the Cloud Storage FUSE CSI driver passes to gcsfuse (GKE docs, "Mount
#: options"); options the driver manages itself (app-name, temp-dir, key-file, log-file,
#: foreground...) are not accepted.
MOUNT_OPTIONS = frozenset({
    "implicit-dirs", "only-dir", "uid", "gid", "file-mode", "dir-mode", "o",
    "rename-dir-limit", "max-conns-per-host", "max-idle-conns-per-host", "read_ahead_kb",
    "stat-cache-ttl", "type-cache-ttl", "stat-cache-capacity", "kernel-list-cache-ttl-secs",
    "sequential-read-size-mb", "limit-bytes-per-sec", "limit-ops-per-sec",
    "client-protocol", "debug_fuse", "debug_gcs", "debug_mutex",
    "metadata-cache:ttl-secs", "metadata-cache:stat-cache-max-size-mb",
    "metadata-cache:type-cache-max-size-mb", "metadata-cache:negative-ttl-secs",
    "file-cache:max-size-mb", "file-cache:cache-file-for-range-read",
    "file-cache:enable-parallel-downloads", "file-cache:parallel-downloads-per-file",
    "file-cache:max-parallel-downloads", "file-cache:download-chunk-size-mb",
    "file-system:kernel-list-cache-ttl-secs", "gcs-connection:client-protocol",
    "gcs-connection:max-conns-per-host", "logging:severity",
    "write:enable-streaming-writes", "read:enable-buffered-read",
})
#: Paths a bucket may not be mounted at or over: the KFP workspace and checkpoint volume.
RESERVED_PATHS = ("/kfp-workspace", "/gkeflow-checkpoints")
_BUCKET_PART = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY_OR_ZERO = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|K|M|G|T)?$")


def check_bucket_name(name: str) -> str:
    """``name`` if it follows Cloud Storage's bucket naming rules, else ValueError."""
    problem = ""
    parts = name.split(".")
    if not 3 <= len(name) <= (222 if len(parts) > 1 else 63):
        problem = "must be 3-63 characters (up to 222 with dots)"
    elif any(not _BUCKET_PART.match(part) or len(part) > 63 for part in parts):
        problem = ("may hold only lowercase letters, digits, '-', '_' and '.', and start and "
                   "end each dot-separated part with a letter or digit")
    elif name.startswith("goog") or "google" in name or "g00gle" in name:
        problem = "may not start with 'goog' or contain 'google'"
    else:
        try:
            ipaddress.ip_address(name)
            problem = "may not be an IP address"
        except ValueError:
            pass
    if problem:
        raise ValueError(f"not a Cloud Storage bucket name: it {problem} "
                         "(give the name without gs://)")
    return name


def overlap(a: str, b: str) -> bool:
    """Whether directory ``a`` is ``b``, or one holds the other."""
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def check_mount_paths(mounts: list[tuple[str, str]]) -> None:
    """ValueError when a mount (path, what is mounted) overlaps gkeflow's own volumes
    (:data:`RESERVED_PATHS`) or another of ``mounts``."""
    seen: dict[str, str] = {}
    for path, name in mounts:
        for reserved in RESERVED_PATHS:
            if overlap(path, reserved):
                raise ValueError(f"mount_path {path} overlaps {reserved}, where gkeflow "
                                 "mounts its own volume: choose another path")
        for other_path, other in seen.items():
            if overlap(path, other_path):
                raise ValueError(f"mount paths {other_path} ({other}) and {path} ({name}) "
                                 "overlap: give each its own directory")
        seen[path] = name


class GcsFuseBucket(BaseModel):
    """One bucket mounted through the Cloud Storage FUSE CSI driver.

    Attributes:
        bucket: The bucket's name (no ``gs://``).
        mount_path: Where steps see it on GKE; default ``/gcs/<bucket>``, as on Vertex AI.
        read_only: Mount read-only (refused for ``shards`` and ``checkpoints``).
        mount_options: gcsfuse options, e.g. ``implicit-dirs``, ``file-cache:max-size-mb=-1``.
        use: What the bucket serves: ``data``, ``shards``, ``checkpoints``.
        claim: The PersistentVolumeClaim bound to it; default ``gcsfuse-<bucket>``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str
    mount_path: str = ""
    read_only: bool = False
    mount_options: tuple[str, ...] = ("implicit-dirs",)
    use: tuple[Use, ...] = ("data",)
    claim: str = ""

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str) -> str:
        return check_bucket_name(value.strip().removeprefix("gs://").strip("/"))

    @field_validator("mount_path")
    @classmethod
    def _mount_path(cls, value: str) -> str:
        if value and (not value.startswith("/") or value.strip() != value or value == "/"):
            raise ValueError("must be an absolute directory other "
                             "than / (e.g. /data)")
        return posixpath.normpath(value) if value else value

    @field_validator("claim")
    @classmethod
    def _claim(cls, value: str) -> str:
        if value and not _CLAIM.match(value):
            raise ValueError("not a PersistentVolumeClaim name: up to 63 "
                             "lowercase letters, digits and '-', starting and ending with a "
                             "letter or digit")
        return value

    @field_validator("mount_options")
    @classmethod
    def _options(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for option in value:
            if "," in option:
                raise ValueError(f"mount option {option!r}: give each option as its own item")
            key = option.split("=", 1)[0].strip()
            if key not in MOUNT_OPTIONS:
                raise ValueError(f"mount option {key!r} is not one the Cloud Storage FUSE CSI "
                                 f"driver accepts{did_you_mean(key, MOUNT_OPTIONS)}; see "
                                 "docs/storage.md for the list")
        return value

    @field_validator("use")
    @classmethod
    def _use(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("use must name at least one of data, shards, checkpoints")
        return tuple(dict.fromkeys(value))

    @model_validator(mode="after")
    def _writable(self):
        writes = [use for use in self.use if use in WRITING_USES]
        if self.read_only and writes:
            raise ValueError(f"bucket {self.bucket} is read_only but holds "
                             f"{' and '.join(writes)}, which steps write: set read_only: "
                             "false or use it for data only")
        return self

    @property
    def path(self) -> str:
        """Where GKE steps see the bucket."""
        return self.mount_path or f"/gcs/{self.bucket}"

    @property
    def claim_name(self) -> str:
        """The PersistentVolumeClaim name (the PersistentVolume is ``gkeflow-<claim>``)."""
        name = f"gcsfuse-{self.bucket.replace('.', '-').replace('_', '-')}"[:63]
        return self.claim or name.rstrip("-")

    def mount_options_text(self) -> str:
        """The options as the driver's comma-separated ``mountOptions`` attribute."""
        return ",".join(self.mount_options)


class SidecarResources(BaseModel):
    """Limits of the gcsfuse sidecar GKE injects (pod annotations ``gke-gcsfuse/*``);
    ``"0"`` lifts a limit, unset keeps GKE's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_limit: str = ""
    memory_limit: str = ""
    ephemeral_storage_limit: str = ""

    @field_validator("cpu_limit", "memory_limit", "ephemeral_storage_limit")
    @classmethod
    def _quantity(cls, value: str) -> str:
        value = str(value).strip()
        if value and not _QUANTITY_OR_ZERO.match(value):
            raise ValueError("not a Kubernetes quantity (e.g. 500m, 1Gi or 0)")
        if value and value[-1] != "m" and value != "0":
            quantity_bytes(value)
        return value

    def annotations(self) -> dict[str, str]:
        names = {"cpu_limit": "cpu-limit", "memory_limit": "memory-limit",
                 "ephemeral_storage_limit": "ephemeral-storage-limit"}
        return {f"gke-gcsfuse/{names[key]}": value
                for key, value in self.model_dump().items() if value}


class GcsFuseSettings(BaseModel):
    """``gcsfuse:`` in gkeflow.yaml: buckets mounted into the steps that use them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    buckets: tuple[GcsFuseBucket, ...] = ()
    sidecar: SidecarResources = Field(default_factory=SidecarResources)

    @model_validator(mode="after")
    def _distinct(self):
        names = [bucket.bucket for bucket in self.buckets]
        twice = next((name for name in names if names.count(name) > 1), "")
        if twice:
            raise ValueError(f"bucket {twice} is listed twice; list it once with every use")
        check_mount_paths([(bucket.path, bucket.bucket) for bucket in self.buckets])
        return self

    def for_use(self, use: str) -> tuple[GcsFuseBucket, ...]:
        """The buckets that serve ``use``."""
        return tuple(bucket for bucket in self.buckets if use in bucket.use)
