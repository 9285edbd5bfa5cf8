"""The vendored API contracts are present, parse, and say where they come from."""

import json
import re

import yaml

from tests.conftest import CONTRACTS


def test_every_vendored_contract_is_present_parses_and_has_its_source():
    readme = (CONTRACTS / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^\| `([^`]+)` \| .*commit `([0-9a-f]{40})`", readme, re.M)
    assert {name for name, _ in listed} == {
        "kfp-v2beta1.swagger.json", "kubeflow-model-registry.openapi.yaml",
        "jobset.x-k8s.io_jobsets.yaml", "kserve/serving.kserve.io_inferenceservices.yaml",
        "kserve/kserve-tensorflow-serving.yaml", "ml-metadata/metadata_store.proto",
        "ml-metadata/metadata_store_service.proto", "ray.io_rayjobs.yaml"}
    for name, _ in listed:
        text = (CONTRACTS / name).read_text(encoding="utf-8")
        if name.endswith(".proto"):
            assert "package ml_metadata;" in text, name
            continue
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: megabytes of YAML
        data = (json.loads(text) if name.endswith(".json")
                else yaml.load(text, Loader=loader))  # noqa: S506 (a safe loader)
        assert isinstance(data, dict) and data, name
    swagger = json.loads((CONTRACTS / "kfp-v2beta1.swagger.json").read_text())
    assert "/apis/v2beta1/runs" in swagger["paths"]


_SCALARS = {"int64": 3, "double": 1, "string": 9, "bool": 8}


def _proto_messages(*names: str) -> dict[str, dict[str, tuple[int, int, int, str]]]:
    """Top-level messages of the vendored protos: field -> (number, label, type, type
    name), labels and types as in descriptor.proto; maps as their entry messages."""
    found = {}
    for name in names:
        text = re.sub(r"//[^\n]*", "", (CONTRACTS / name).read_text(encoding="utf-8"))
        for match in re.finditer(r"^message (\w+) \{", text, re.M):
            depth, start = 0, match.end() - 1
            for end in range(start, len(text)):
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                if depth == 0:
                    break
            body = text[start + 1:end]
            enums = set(re.findall(r"\n  enum (\w+) \{", body))
            body = re.sub(r"\n  (message|enum) \w+ \{.*?\n  \}", "", body, flags=re.S)
            fields = {}
            for label, kind, field, number in re.findall(
                    r"^\s*(?:(optional|repeated|required)\s+)?(map<[^>]+>|[\w.]+)\s+(\w+)"
                    r"\s*=\s*(\d+)", body, re.M):
                if kind.startswith("map<"):
                    entry = "".join(p.title() for p in field.split("_")) + "Entry"
                    fields[field] = (int(number), 3, 11, f".ml_metadata.{match[1]}.{entry}")
                elif kind in enums:  # an enum nested in the message
                    fields[field] = (int(number), 3 if label == "repeated" else 1, 14,
                                     f".ml_metadata.{match[1]}.{kind}")
                elif kind in _SCALARS:
                    fields[field] = (int(number), 3 if label == "repeated" else 1,
                                     _SCALARS[kind], "")
                else:
                    type_name = kind if kind.startswith("google.") else f"ml_metadata.{kind}"
                    fields[field] = (int(number), 3 if label == "repeated" else 1, 11,
                                     f".{type_name}")
            found[match[1]] = fields
    return found


def test_the_ml_metadata_messages_gkeflow_declares_match_the_vendored_protos():
    from gkeflow.components.cloud import mlmd

    contract = _proto_messages("ml-metadata/metadata_store.proto",
                               "ml-metadata/metadata_store_service.proto")
    assert len(contract["Artifact"]) >= 10 and "artifact_ids" in contract[
        "GetArtifactsByIDRequest"]  # the parser reads the files
    for message, fields in mlmd._MESSAGES.items():
        for name, number, label, kind, type_name in fields:
            assert contract[message][name] == (number, label, kind, type_name), (
                f"ml_metadata.{message}.{name}")
    store = (CONTRACTS / "ml-metadata/metadata_store.proto").read_text()
    for message, (enum, values) in mlmd._ENUMS.items():
        block = re.search(rf"^message {message} \{{.*?\n  enum {enum} \{{(.*?)\n  \}}",
                          store, re.M | re.S)
        assert block, f"ml_metadata.{message}.{enum}"
        declared = [(n, int(v)) for n, v in re.findall(r"(\w+) = (\d+);", block[1])]
        assert declared == values, f"ml_metadata.{message}.{enum}"
    service = (CONTRACTS / "ml-metadata/metadata_store_service.proto").read_text()
    for method in ("GetArtifactsByID", "GetExecutionsByID"):
        assert re.search(rf"rpc {method}\({method}Request\)\s+returns \({method}Response\)",
                         service), method
    assert "service MetadataStoreService" in service and mlmd.SERVICE.endswith(
        "MetadataStoreService")
