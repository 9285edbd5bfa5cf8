"""Serving hand-off: the servability check, then a Vertex AI Endpoint or a KServe
InferenceService with canary traffic, promotion and rollback, and a local stand-in that
answers TensorFlow Serving's REST requests on loopback.

- :mod:`.servable`: load the SavedModel as TensorFlow Serving does and answer the
  evaluation's rows through the REST ``instances`` mapping; refuse a model that does not.
- :mod:`.traffic`: the traffic split as a value: canary, promote, rollback, keep.
- :mod:`.runtimes`: serving images and runtime versions matched to the training TensorFlow.
- :mod:`.vertex_endpoint`: create-or-get the endpoint, deploy, split, undeploy.
- :mod:`.kserve`: the InferenceService manifest (Serverless and Standard canaries) and its
  create/update through the Kubernetes API.
- :mod:`.local_server`: ``gkeflow deploy local``: the same REST mapping on loopback.
- :mod:`.logic`: the deploy step over plain values; :mod:`.component`: its KFP shell.

Imports: the standard library, ``gkeflow.components`` and the cloud clients, inside
functions.
"""
