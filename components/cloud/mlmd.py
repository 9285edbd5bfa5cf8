"""Read ML Metadata (MLMD), where Kubeflow Pipelines keeps what a run's steps produced.

The v2beta1 runs API names each step's MLMD execution (``execution_id``) and output
artifacts (``outputs`` -> artifact ids) but not their values: a ``system.Metrics``
artifact's numbers are its MLMD custom properties, a step's output parameters the
``outputs`` struct of its execution's custom properties (kubeflow/pipelines
``backend/src/v2/metadata``). This module asks MLMD for them with two calls of
``ml_metadata.MetadataStoreService`` over gRPC-Web, the protocol the Kubeflow Pipelines UI
uses: through the UI server (``<ui>/ml_metadata.MetadataStoreService/...``, what
``gkeflow runs show`` reaches) or, inside the cluster, the ``metadata-envoy-service``.

The messages are the subset of ``ml_metadata/proto/metadata_store{,_service}.proto`` these
two calls need, built here at import (no generated code, no ``ml-metadata`` package);
``tests/contracts/ml-metadata/`` holds the protos they are checked against field by field.
"""

from __future__ import annotations

import functools
import struct as binary
from collections.abc import Callable, Iterable
from typing import Any

SERVICE = "ml_metadata.MetadataStoreService"
CONTENT_TYPE = "application/grpc-web+proto"
METRICS_TYPE = "system.Metrics"
#: Custom properties KFP adds to every artifact; not metrics.
_BOOKKEEPING = frozenset({"display_name", "store_session_info"})
#: gRPC status -> the HTTP status a retry policy understands.
_HTTP_OF_GRPC = {1: 499, 2: 500, 3: 400, 4: 504, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400,
                 10: 409, 11: 400, 12: 501, 13: 500, 14: 503, 15: 500, 16: 401}

#: (message, [(field, number, label, type, type name)]) — label: 1 optional, 3 repeated;
#: type: 3 int64, 1 double, 9 string, 8 bool, 11 message.
_MESSAGES = {
    "Value": [("int_value", 1, 1, 3, ""), ("double_value", 2, 1, 1, ""),
              ("string_value", 3, 1, 9, ""),
              ("struct_value", 4, 1, 11, ".google.protobuf.Struct"),
              ("proto_value", 5, 1, 11, ".google.protobuf.Any"), ("bool_value", 6, 1, 8, "")],
    "Artifact": [("id", 1, 1, 3, ""), ("type_id", 2, 1, 3, ""), ("uri", 3, 1, 9, ""),
                 ("properties", 4, 3, 11, ".ml_metadata.Artifact.PropertiesEntry"),
                 ("custom_properties", 5, 3, 11, ".ml_metadata.Artifact.CustomPropertiesEntry"),
                 ("name", 7, 1, 9, ""), ("type", 8, 1, 9, "")],
    "Execution": [("id", 1, 1, 3, ""), ("type_id", 2, 1, 3, ""),
                  ("last_known_state", 3, 1, 14, ".ml_metadata.Execution.State"),
                  ("properties", 4, 3, 11, ".ml_metadata.Execution.PropertiesEntry"),
                  ("custom_properties", 5, 3, 11,
                   ".ml_metadata.Execution.CustomPropertiesEntry"),
                  ("name", 6, 1, 9, ""), ("type", 7, 1, 9, "")],
    "GetArtifactsByIDRequest": [("artifact_ids", 1, 3, 3, "")],
    "GetArtifactsByIDResponse": [("artifacts", 1, 3, 11, ".ml_metadata.Artifact")],
    "GetExecutionsByIDRequest": [("execution_ids", 1, 3, 3, "")],
    "GetExecutionsByIDResponse": [("executions", 1, 3, 11, ".ml_metadata.Execution")],
}
#: Enums nested in a message: message -> (enum, [(value, number)]).
_ENUMS = {"Execution": ("State", [("UNKNOWN", 0), ("NEW", 1), ("RUNNING", 2), ("COMPLETE", 3),
                                  ("FAILED", 4), ("CACHED", 5), ("CANCELED", 6)])}
_MAPS = {"Artifact": ("properties", "custom_properties"),
         "Execution": ("properties", "custom_properties")}


class MetadataError(RuntimeError):
    """An MLMD call that failed; ``status`` is the HTTP status, or the gRPC status mapped
    to one (UNAVAILABLE -> 503, ...) so the retry policy treats both alike."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@functools.cache
def messages() -> dict[str, type]:
    """Message name -> class, in a pool of their own."""
    from google.protobuf import (
        any_pb2,
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        struct_pb2,
    )

    pool = descriptor_pool.DescriptorPool()
    for module in (any_pb2, struct_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(
            module.DESCRIPTOR.serialized_pb))
    file = descriptor_pb2.FileDescriptorProto(
        name="gkeflow/ml_metadata_subset.proto", package="ml_metadata", syntax="proto2",
        dependency=["google/protobuf/any.proto", "google/protobuf/struct.proto"])
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        if name == "Value":
            message.oneof_decl.add(name="value")
        if name in _ENUMS:
            enum_name, values = _ENUMS[name]
            enum = message.enum_type.add(name=enum_name)
            for value_name, number in values:
                enum.value.add(name=value_name, number=number)
        for field_name, number, label, kind, type_name in fields:
            field = message.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                field.type_name = type_name
            if name == "Value":
                field.oneof_index = 0
        for map_field in _MAPS.get(name, ()):
            entry = message.nested_type.add(
                name="".join(p.title() for p in map_field.split("_")) + "Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=1, type=9)
            entry.field.add(name="value", number=2, label=1, type=11,
                            type_name=".ml_metadata.Value")
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"ml_metadata.{name}")) for name in _MESSAGES}


def frame(message) -> bytes:
    """One gRPC-Web data frame: flag 0, big-endian length, the serialized message."""
    data = message.SerializeToString()
    return b"\x00" + binary.pack(">I", len(data)) + data


def unframe(body: bytes, headers: dict[str, str] | None = None) -> bytes:
    """The message bytes of a gRPC-Web answer; :class:`MetadataError` for a gRPC error
    (in the headers of a trailers-only answer, or in the trailer frame)."""
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    _check(headers.get("grpc-status"), headers.get("grpc-message", ""))
    data, offset = b"", 0
    while offset + 5 <= len(body):
        flag, length = body[offset], binary.unpack(">I", body[offset + 1:offset + 5])[0]
        chunk = body[offset + 5:offset + 5 + length]
        if len(chunk) < length:
            raise MetadataError("ML Metadata's answer was cut short", 503)
        offset += 5 + length
        if flag & 0x80:  # trailers: "grpc-status: 0\r\ngrpc-message: ...\r\n"
            trailers = dict(line.split(":", 1) for line in chunk.decode("utf-8", "replace")
                            .splitlines() if ":" in line)
            trailers = {k.strip().lower(): v.strip() for k, v in trailers.items()}
            _check(trailers.get("grpc-status"), trailers.get("grpc-message", ""))
        else:
            data += chunk
    if offset != len(body):
        raise MetadataError("ML Metadata's answer was cut short", 503)
    return data


def _check(status: str | None, message: str) -> None:
    if status is None or str(status).strip() in ("", "0"):
        return
    import urllib.parse

    code = int(status)
    raise MetadataError(f"ML Metadata: gRPC status {code}: "
                        f"{urllib.parse.unquote(message) or 'no message'}",
                        _HTTP_OF_GRPC.get(code, 500))


#: Sends one request: (method, body bytes) -> (response headers, response body).
Transport = Callable[[str, bytes], tuple[dict[str, str], bytes]]


class MetadataReader:
    """``GetArtifactsByID`` and ``GetExecutionsByID`` over a gRPC-Web ``transport``."""

    def __init__(self, transport: Transport):
        self.transport = transport

    def _unary(self, method: str, request, response_name: str):
        headers, body = self.transport(f"/{SERVICE}/{method}", frame(request))
        return messages()[response_name].FromString(unframe(body, headers))

    def _by_ids(self, kind: str, ids: Iterable[int]) -> list:
        """``Get<Kind>sByID`` for ``ids`` (none: no call); the found ones, in no order."""
        ids = sorted({int(i) for i in ids})
        if not ids:
            return []
        method, field = f"Get{kind}sByID", f"{kind.lower()}s"
        request = messages()[f"{method}Request"](**{f"{kind.lower()}_ids": ids})
        return list(getattr(self._unary(method, request, f"{method}Response"), field))

    def artifacts(self, ids: Iterable[int]) -> list:
        return self._by_ids("Artifact", ids)

    def executions(self, ids: Iterable[int]) -> list:
        return self._by_ids("Execution", ids)


def value_of(value) -> Any:
    """An ``ml_metadata.Value`` as a Python value (None when unset)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "struct_value":
        from google.protobuf import json_format

        return json_format.MessageToDict(value.struct_value)
    if kind == "proto_value":
        return None
    return getattr(value, kind)


def scalar_metrics(artifacts: Iterable) -> dict[str, float]:
    """The numbers of the ``system.Metrics`` artifacts (KFP's own bookkeeping left out)."""
    found: dict[str, float] = {}
    for artifact in artifacts:
        if artifact.type != METRICS_TYPE:
            continue
        for key, value in artifact.custom_properties.items():
            number = value_of(value)
            if key in _BOOKKEEPING or isinstance(number, bool):
                continue
            if isinstance(number, (int, float)):
                found[key] = float(number)
    return found


def output_parameters(execution) -> dict[str, Any]:
    """A step's output parameters: its execution's ``outputs`` custom property."""
    outputs = execution.custom_properties.get("outputs")
    parameters = value_of(outputs) if outputs is not None else None
    return parameters if isinstance(parameters, dict) else {}


def version_text(value: Any) -> str:
    """A model version as the registries print it. ML Metadata (Kubeflow's, and Vertex AI's
    execution metadata) keeps output parameters in a protobuf Struct, whose numbers are
    doubles: ``3.0`` -> ``3``; unset -> ``""``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return "" if value is None else str(value)


def registered_version(reader: MetadataReader, execution_ids: Iterable[int]) -> str:
    """The ``model_version`` output of the first of these executions that has one (a step's
    and its driver's, when the backend names both)."""
    for execution in reader.executions(execution_ids):
        version = version_text(output_parameters(execution).get("model_version"))
        if version:
            return version
    return ""


def urllib_transport(base_url: str, headers: dict[str, str] | None = None,
                     timeout_s: float = 10.0) -> Transport:
    """A :data:`Transport` over ``urllib`` to ``base_url`` (the steps' own, no client
    library): the in-cluster ``metadata-envoy-service`` or a UI server."""
    import urllib.error
    import urllib.request

    def send(path: str, body: bytes) -> tuple[dict[str, str], bytes]:
        request = urllib.request.Request(
            base_url.rstrip("/") + path, data=body, method="POST",
            headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE,
                     "X-Grpc-Web": "1", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                return dict(answer.headers.items()), answer.read()
        except urllib.error.HTTPError as exc:
            raise MetadataError(f"ML Metadata at {base_url}: HTTP {exc.code}",
                                exc.code) from None

    return send
