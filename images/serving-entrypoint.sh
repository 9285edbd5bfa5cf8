#!/bin/sh
# Start TensorFlow Serving the way Vertex AI calls a custom container: REST on
# $AIP_HTTP_PORT (default 8501), the model from $AIP_STORAGE_URI (default
# /models/$MODEL_NAME), answering /v1/models/$MODEL_NAME:predict and /v1/models/$MODEL_NAME.
set -eu
exec tensorflow_model_server \
    --port=8500 \
    --rest_api_port="${AIP_HTTP_PORT:-8501}" \
    --model_name="${MODEL_NAME:-model}" \
    --model_base_path="${AIP_STORAGE_URI:-/models/${MODEL_NAME:-model}}" \
    "$@"
