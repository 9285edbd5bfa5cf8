#!/usr/bin/env bash
# Builds a local stand-in for the images' base image (python:3.11.11-slim-bookworm) where
# it cannot be pulled, so that `gkeflow images build --builder podman` (or a plain
# `podman build`) runs the unmodified Dockerfiles.
#
# Use it once, on a machine whose container engine cannot reach Docker Hub or a mirror of
# it; where the base can be pulled, or with `--builder cloud-build`, it is not needed.
#
#   bash images/container-base.sh [IMAGE_NAME]
#       IMAGE_NAME  the name to tag (default: the FROM of images/cpu.Dockerfile, when run
#                   from a clone's root); short names get docker.io/library/ in front.
#   gkeflow images build --builder podman
#
# What it does: installs podman and mmdebstrap with apt-get when missing (run it as root
# on Debian or Ubuntu); builds a Debian bookworm root file system with python3 (3.11),
# venv, pip and CA certificates from Debian's package mirror (about a minute); adds this
# machine's CA bundle, so pip inside the build trusts a TLS-inspecting proxy; imports it
# and tags it IMAGE_NAME. An image of that name already present is left alone.
#
# Differences from the official image: Debian's python3 (/usr/bin/python3, 3.11.x), not
# its patch release. Good for building and testing the images where nothing can be
# pulled; build release images from the real base. Recipe: docs/image-recipes.md.
set -euo pipefail
name="${1:-}"
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "$name" ]; then
  df="images/cpu.Dockerfile"
  [ -f "$df" ] || { echo "run from the project root, or pass the image name" >&2; exit 2; }
  name="$(awk 'toupper($1)=="FROM"{print $2; exit}' "$df")"
fi
case "$name" in */*) ;; *) name="docker.io/library/$name" ;; esac
command -v podman >/dev/null && command -v mmdebstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman mmdebstrap >/dev/null; }
if podman image exists "$name"; then echo "$name already present"; exit 0; fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
echo "building a Debian bookworm root file system with python3 (about a minute)..."
mmdebstrap --quiet --variant=apt \
  --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,passwd \
  bookworm "$work/rootfs.tar"
podman import --quiet "$work/rootfs.tar" localhost/debian-python-rootfs:bookworm >/dev/null
cp /etc/ssl/certs/ca-certificates.crt "$work/ca.crt"
cat > "$work/Containerfile" <<'CF'
FROM localhost/debian-python-rootfs:bookworm
COPY ca.crt /etc/ssl/certs/ca-certificates.crt
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
CMD ["python3"]
CF
podman build --quiet --isolation=chroot --pull=never -t "$name" "$work" >/dev/null
echo "tagged $name (a local stand-in built from Debian packages)"
