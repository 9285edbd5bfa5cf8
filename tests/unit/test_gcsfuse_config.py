"""gcsfuse: settings are validated before anything compiles, each problem in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from gkeflow.pipelines.settings.gcsfuse_config import GcsFuseSettings, check_bucket_name


def _settings(*buckets, **extra) -> GcsFuseSettings:
    return GcsFuseSettings.model_validate({"buckets": list(buckets), **extra})


@pytest.mark.parametrize("name", ["ab", "a" * 64, "My-Bucket", "-bucket", "bucket-",
                                  "goog-data", "my-google-data", "192.168.5.4", "a..b",
                                  "b@d"])
def test_bucket_names_outside_the_rules_are_refused(name):
    with pytest.raises(ValueError, match="not a Cloud Storage bucket name"):
        check_bucket_name(name)


@pytest.mark.parametrize("name", ["abc", "my_data-1", "data.example.com", "a" * 63])
def test_bucket_names_within_the_rules_pass(name):
    assert check_bucket_name(name) == name


def test_defaults_mount_at_gcs_bucket_with_implicit_dirs():
    bucket = _settings({"bucket": "gs://my-data/"}).buckets[0]
    assert (bucket.bucket, bucket.path, bucket.mount_options_text(), bucket.use,
            bucket.claim_name) == ("my-data", "/gcs/my-data", "implicit-dirs", ("data",),
                                   "gcsfuse-my-data")


@pytest.mark.parametrize("buckets, message", [
    ([{"bucket": "a-data", "mount_path": "data"}], "must be an absolute directory"),
    ([{"bucket": "a-data", "mount_path": "/"}], "must be an absolute directory"),
    ([{"bucket": "a-data", "mount_path": "/data"}, {"bucket": "b-data",
                                                  "mount_path": "/data/b"}], "overlap"),
    ([{"bucket": "a-data", "mount_path": "/kfp-workspace/x"}], "overlaps /kfp-workspace"),
    ([{"bucket": "a-data"}, {"bucket": "a-data", "mount_path": "/x"}], "listed twice"),
    ([{"bucket": "a-data", "mount_options": ["temp-dir=/tmp"]}], "not one the Cloud"),
    ([{"bucket": "a-data", "mount_options": ["implicit-dirs,uid=1"]}], "its own item"),
    ([{"bucket": "a-data", "read_only": True, "use": ["data", "checkpoints"]}],
     "read_only but holds checkpoints"),
    ([{"bucket": "a-data", "use": ["models"]}], "use"),
    ([{"bucket": "a-data", "use": []}], "at least one"),
    ([{"bucket": "a-data", "claim": "Data_Claim"}], "not a PersistentVolumeClaim name"),
])
def test_invalid_buckets_are_refused(buckets, message):
    with pytest.raises(ValidationError, match=message):
        _settings(*buckets)


def test_options_and_sidecar_limits_are_kept():
    settings = _settings({"bucket": "a-data", "mount_options": [
        "implicit-dirs", "file-cache:max-size-mb=-1", "metadata-cache:ttl-secs=-1"]},
        sidecar={"cpu_limit": "500m", "memory_limit": "0", "ephemeral_storage_limit": "5Gi"})
    assert settings.buckets[0].mount_options_text() == (
        "implicit-dirs,file-cache:max-size-mb=-1,metadata-cache:ttl-secs=-1")
    assert settings.sidecar.annotations() == {
        "gke-gcsfuse/cpu-limit": "500m", "gke-gcsfuse/memory-limit": "0",
        "gke-gcsfuse/ephemeral-storage-limit": "5Gi"}


def test_sidecar_limit_must_be_a_quantity():
    with pytest.raises(ValidationError, match="not a Kubernetes quantity"):
        _settings(sidecar={"memory_limit": "lots"})


def test_compile_refuses_a_read_only_bucket_for_outputs_in_one_line(tmp_path):
    (tmp_path / "gkeflow.yaml").write_text(
        "gcsfuse:\n  buckets:\n    - bucket: my-data\n      read_only: true\n"
        "      use: [data, shards]\n")
    result = subprocess.run(
        [sys.executable, "-m", "gkeflow.pipelines.cli.main", "compile", "--check"],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "read_only but holds shards" in lines[0], result.stderr


def test_default_claim_names_are_valid_for_any_bucket_name():
    long = "a" * 55 + "-" + "b" * 7
    for name in ("my_data.example.com", long):
        claim = _settings({"bucket": name}).buckets[0].claim_name
        assert len(claim) <= 63 and claim[-1].isalnum() and "_" not in claim and "." not in claim
