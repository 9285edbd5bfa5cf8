"""A Kubeflow Pipelines host that answers with a web page (a sign-in page in front of the
API, or another site), a token that cannot be a header, and a run id that is not one: each
is one line naming the fix and a non-zero exit, never an empty result or the token."""

from __future__ import annotations

import pytest

from tests.integration.conftest import TOKEN, config_dict, gkeflow
from tests.integration.sign_in_page import sign_in_page


@pytest.fixture
def sign_in_host():
    with sign_in_page() as port:
        yield f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("command", [
    ["runs", "list", "--target", "gke"],
    ["runs", "show", "0d9d6f58-3c6e-4d4e-9a59-7f7a3f5c2b10", "--target", "gke"],
    ["schedule", "list"],
    ["submit", "training", "--target", "gke"],
])
def test_a_web_page_instead_of_the_api_is_an_error_naming_the_fix(command, sign_in_host,
                                                                   tmp_path, write_config):
    path = write_config(config_dict(sign_in_host, None))
    result = gkeflow(*command, "--config", str(path), cwd=tmp_path,
                     env={"GKEFLOW_TEST_KFP_TOKEN": TOKEN})
    assert result.returncode == 1, result.stdout
    assert "with a web page, not the Kubeflow Pipelines API" in result.stderr
    assert "set targets.gke.auth" in result.stderr and "Traceback" not in result.stderr
    assert TOKEN not in result.stdout + result.stderr


@pytest.mark.parametrize("token", ["SECRETTOK\nEN2", "SECRET TOKEN", "SECRET\u20acTOKEN"])
def test_a_token_that_cannot_be_a_header_is_named_and_never_printed(token, sign_in_host,
                                                                    tmp_path, write_config):
    path = write_config(config_dict(sign_in_host, None))
    result = gkeflow("runs", "show", "abc", "--target", "gke", "--config", str(path),
                     cwd=tmp_path, env={"GKEFLOW_TEST_KFP_TOKEN": token})
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert "the token in environment variable GKEFLOW_TEST_KFP_TOKEN holds a space" in output
    assert "SECRET" not in output


@pytest.mark.parametrize("run_id", ["", " ", "../pipelines", "abc?x=1"])
def test_a_run_id_that_is_not_one_is_refused_before_any_request(run_id, tmp_path):
    result = gkeflow("runs", "show", run_id, cwd=tmp_path)
    assert result.returncode == 2
    assert "is not a run id; `gkeflow runs list` shows them" in result.stderr
