"""Local fake Kubeflow Pipelines and Vertex AI HTTP servers that check what they are sent.

They are real HTTP servers on 127.0.0.1 (a thread each) for real clients: ``kfp.Client``
and ``google.cloud.aiplatform`` with ``api_transport="rest"``. They keep state in memory
(pipelines, versions, experiments, runs, recurring runs; pipeline jobs, schedules), advance
a run one step per status request, and can be told to fail (``inject``).

Strictness:

* KFP: every request is matched to an operation of ``kfp-v2beta1.swagger.json``; its query
  parameter names must be declared there and its JSON body must validate against the
  operation's body schema with unknown properties forbidden. (int64 fields are declared as
  strings, as grpc-gateway prints them, but it also accepts JSON numbers, which
  ``kfp_server_api`` sends; both are allowed.) Every pipeline spec (uploaded file or
  embedded) is parsed with ``json_format.ParseDict(..., ignore_unknown_fields=False)`` into
  ``PipelineSpec``, the platform spec into ``PlatformSpec`` and each Kubernetes executor
  config into ``KubernetesExecutorConfig``. The fake's own answers are validated too.
* Vertex: every body is parsed with ``google.cloud.aiplatform_v1.<Type>.from_json(body,
  ignore_unknown_fields=False)``, and the pipeline spec inside a PipelineJob as above.

A request that fails validation gets 400 and is recorded in ``violations``; the test
fixtures fail any test that leaves violations behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.integration.fake_http import (  # noqa: F401  (the tests import them from here)
    CONTRACTS,
    KFP_SWAGGER,
    Conflict,
    Fault,
    Invalid,
    Recorded,
    parse_pipeline_spec_strict,
    task_names,
)
from tests.integration.fake_kfp import FakeKfpServer
from tests.integration.fake_vertex_pipelines import FakeVertexServer


@dataclass
class Servers:
    kfp: FakeKfpServer
    vertex: FakeVertexServer
    extra: dict = field(default_factory=dict)
