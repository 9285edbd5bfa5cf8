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
        "kserve/kserve-tensorflow-serving.yaml"}
    for name, _ in listed:
        text = (CONTRACTS / name).read_text(encoding="utf-8")
        data = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        assert isinstance(data, dict) and data, name
    swagger = json.loads((CONTRACTS / "kfp-v2beta1.swagger.json").read_text())
    assert "/apis/v2beta1/runs" in swagger["paths"]
