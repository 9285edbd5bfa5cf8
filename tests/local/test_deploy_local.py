"""Done when: a local run trains, registers and deploys (the local stand-in), and the
stand-in answers `instances` requests with the same classes as the evaluation — through the
real `gkeflow` command. The run is the session's `gkeflow run --deploy` (tests/conftest.py, through
the command's click entry point); the endpoint is asked through the console script."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import gkeflow

pytestmark = pytest.mark.slow
NAME = "penguins-classifier"


def test_run_deploy_then_ask_the_local_endpoint(penguins_run, tmp_path):
    out, printed = penguins_run
    assert f"Deployed:  {NAME} (local stand-in): {NAME}@1 100%" in printed
    request = out / "requests" / f"{NAME}.json"
    expected = json.loads((out / "requests" / f"{NAME}.expected.json").read_text())

    asked = gkeflow("deploy", "local", NAME, "--output", str(out), "--request", str(request),
                    cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout.strip().splitlines()[-1])
    assert answer["classes"] == expected["classes"]  # the evaluation's classes
    assert len(answer["predictions"]) == len(json.loads(request.read_text())["instances"])

    listed = gkeflow("models", "list", "--output", str(out), cwd=tmp_path)
    assert f"{NAME} 100%" in listed.stdout

    status = gkeflow("deploy", "status", NAME, "--output", str(out), cwd=tmp_path)
    assert status.stdout.strip() == f"{NAME}: v1 100%"
    dry = gkeflow("deploy", f"{NAME}@1", "--target", "local", "--output", str(out),
                  "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0 and "would serve" in dry.stdout, dry.stderr
    assert "servable" in dry.stderr

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"instances": [{"island": 3}]}))
    refused = gkeflow("deploy", "local", NAME, "--output", str(out), "--request", str(bad),
                      cwd=tmp_path)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "instance 0" in refused.stderr
