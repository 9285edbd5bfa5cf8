"""Artifact types the deploy step emits.

``VertexEndpoint`` is Google's ``google.VertexEndpoint`` type (the one Google Cloud
Pipeline Components' endpoint and deploy steps emit): Vertex AI Pipelines links an output
of this type, by its ``resourceName`` metadata, to the endpoint in the console. Defined
here for the same reason as :mod:`gkeflow.components.register.artifact_types`.
"""

from kfp import dsl


class VertexEndpoint(dsl.Artifact):
    """A Vertex AI endpoint: ``metadata["resourceName"]`` is
    ``projects/<p>/locations/<l>/endpoints/<id>``; ``uri`` its REST address."""

    schema_title = "google.VertexEndpoint"
    schema_version = "0.0.1"
