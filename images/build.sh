#!/usr/bin/env bash
# Build and push the CPU and GPU images with Cloud Build, then record their digests in
# images/images.lock.json (which `gkeflow compile` pins every step's image to).
# Needs gcloud, authenticated, with a default project. Run from anywhere:
#   images/build.sh [extra gcloud builds submit flags, e.g. --region=us-central1]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
substitutions="$("$PYTHON" -m gkeflow.components.images tags)"
build_json="$(mktemp)"
trap 'rm -f "$build_json"' EXIT
build_id="$(gcloud builds submit --config images/cloudbuild.yaml \
  --substitutions "$substitutions" --async --format='value(id)' "$@" .)"
echo "Cloud Build $build_id: streaming its log"
gcloud builds log --stream "$build_id" "$@" || true
gcloud builds describe "$build_id" --format=json "$@" > "$build_json"
"$PYTHON" -m gkeflow.components.images record-build "$build_json"
echo "Now run: .venv/bin/gkeflow compile --release"
