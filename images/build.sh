#!/usr/bin/env bash
# Build and push the CPU and GPU images into the registry of gkeflow.yaml's `images:`
# section and record their digests in its lock file (gkeflow.lock next to gkeflow.yaml).
# Kept for old instructions: `gkeflow images build` does the work; see docs/images.md.
#   images/build.sh [--builder cloud-build|docker|podman] [--no-push] [--config FILE]
set -euo pipefail
exec "${GKEFLOW:-gkeflow}" images build "$@"
