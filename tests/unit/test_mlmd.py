"""gRPC-Web framing and the values gkeflow reads from ML Metadata (no server: the HTTP side
is tested against the fake KFP in tests/integration/test_runs.py)."""

import struct

import pytest

from gkeflow.components.cloud import mlmd
from gkeflow.components.cloud.retry import is_transient


def _trailer(status: int, message: str = "") -> bytes:
    text = f"grpc-status: {status}\r\ngrpc-message: {message}\r\n".encode()
    return b"\x80" + struct.pack(">I", len(text)) + text


def _metrics_artifact(**values):
    artifact = mlmd.messages()["Artifact"](id=7, type=mlmd.METRICS_TYPE)
    for key, value in values.items():
        if isinstance(value, str):
            artifact.custom_properties[key].string_value = value
        elif isinstance(value, bool):
            artifact.custom_properties[key].bool_value = value
        elif isinstance(value, int):
            artifact.custom_properties[key].int_value = value
        else:
            artifact.custom_properties[key].double_value = value
    return artifact


def test_a_framed_answer_round_trips_with_its_trailers():
    kinds = mlmd.messages()
    answer = kinds["GetArtifactsByIDResponse"](artifacts=[_metrics_artifact(accuracy=0.5)])
    body = mlmd.frame(answer) + _trailer(0)
    parsed = kinds["GetArtifactsByIDResponse"].FromString(mlmd.unframe(body))
    assert parsed == answer
    request = mlmd.frame(kinds["GetExecutionsByIDRequest"](execution_ids=[3, 4]))
    assert request[0] == 0 and struct.unpack(">I", request[1:5])[0] == len(request) - 5


@pytest.mark.parametrize("where", ["trailer", "headers"])
def test_a_grpc_error_becomes_an_http_like_status(where):
    body, headers = (_trailer(14, "connection%20refused"), {}) if where == "trailer" else (
        b"", {"Grpc-Status": "14", "Grpc-Message": "connection refused"})
    with pytest.raises(mlmd.MetadataError, match="gRPC status 14: connection refused") as err:
        mlmd.unframe(body, headers)
    assert err.value.status == 503 and is_transient(err.value)
    with pytest.raises(mlmd.MetadataError) as not_found:
        mlmd.unframe(_trailer(5, "no such execution"))
    assert not_found.value.status == 404 and not is_transient(not_found.value)


def test_an_answer_cut_short_is_transient():
    whole = mlmd.frame(mlmd.messages()["GetArtifactsByIDResponse"](
        artifacts=[_metrics_artifact(accuracy=0.5)]))
    with pytest.raises(mlmd.MetadataError, match="cut short") as err:
        mlmd.unframe(whole[:-3])
    assert is_transient(err.value)


def test_scalar_metrics_skip_kfp_bookkeeping_and_other_artifacts():
    metrics = _metrics_artifact(accuracy=0.9, log_loss=0.25, examples=300, flag=True,
                                display_name="metrics", store_session_info="{}")
    model = mlmd.messages()["Artifact"](id=8, type="system.Model")
    model.custom_properties["accuracy"].double_value = 0.1
    assert mlmd.scalar_metrics([metrics, model]) == {"accuracy": 0.9, "log_loss": 0.25,
                                                     "examples": 300.0}


def test_output_parameters_are_the_executions_outputs_struct():
    execution = mlmd.messages()["Execution"](id=3)
    assert mlmd.output_parameters(execution) == {}
    execution.custom_properties["outputs"].struct_value.update(
        {"model_version": 4, "resource_name": "penguins/4"})
    execution.custom_properties["inputs"].struct_value.update({"epochs": 3})
    assert mlmd.output_parameters(execution) == {"model_version": 4.0,
                                                 "resource_name": "penguins/4"}


def test_no_ids_make_no_call():
    def transport(path, body):  # pragma: no cover - must not be called
        raise AssertionError(path)

    reader = mlmd.MetadataReader(transport)
    assert reader.artifacts([]) == [] and reader.executions([]) == []


def test_the_registered_version_is_the_first_execution_that_has_one():
    kinds = mlmd.messages()
    driver, step = kinds["Execution"](id=1), kinds["Execution"](id=2)
    step.custom_properties["outputs"].struct_value.update({"model_version": 12})

    def transport(path, body):
        request = kinds["GetExecutionsByIDRequest"].FromString(body[5:])
        assert list(request.execution_ids) == [1, 2]
        answer = kinds["GetExecutionsByIDResponse"](executions=[driver, step])
        return {}, mlmd.frame(answer) + _trailer(0)

    assert mlmd.registered_version(mlmd.MetadataReader(transport), [2, 1]) == "12"
    assert mlmd.version_text(3.0) == "3" and mlmd.version_text(2.5) == "2.5"
    assert mlmd.version_text("v7") == "v7" and mlmd.version_text(None) == ""
