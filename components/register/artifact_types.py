"""Artifact types the registration step emits.

``VertexModel`` is Google's ``google.VertexModel`` type (the one Google Cloud Pipeline
Components emit): Vertex AI Pipelines links an output of this type, by its
``resourceName`` metadata, to the model in the Vertex AI Model Registry, so the console
shows lineage from the pipeline run to the model version. Defined here rather than
imported, because google-cloud-pipeline-components pins google-cloud-aiplatform<2.
"""

from kfp import dsl


class VertexModel(dsl.Artifact):
    """A Vertex AI model version: ``metadata["resourceName"]`` is
    ``projects/<p>/locations/<l>/models/<id>@<version>``; ``uri`` its REST address."""

    schema_title = "google.VertexModel"
    schema_version = "0.0.1"
