#!/usr/bin/env bash
# Make the project's container images buildable on a machine that cannot pull from image
# registries: builds a local stand-in for a Debian "python:<ver>-slim-bookworm" base image
# from Debian's own packages (mmdebstrap), adds this machine's CA bundle (package indexes
# are reached through a TLS proxy here), and tags it with the name the Dockerfiles use, so
# `podman build` runs the unmodified Dockerfiles.
#
#   ../shared/tools/container-base.sh [IMAGE_NAME]     (default: the FROM of images/cpu.Dockerfile)
#   (vendored as images/container-base.sh from ../shared/tools/container-base.sh)
#   podman build --isolation=chroot --pull=never -f images/cpu.Dockerfile -t localhost/gkeflow-cpu:dev .
#
# Facts about this sandbox (measured):
# - `podman build --isolation=chroot` works (no daemon, runs as root); RUN steps execute.
# - `podman run` does NOT work here: the OCI runtime's setrlimit is refused. To execute a
#   command inside a built image, either add a RUN step in a derived Containerfile
#   (FROM localhost/gkeflow-cpu:dev / RUN <command>) or mount the image's root file system
#   (`podman image mount IMAGE`) and chroot into it with /proc, /dev and your work
#   directory bind-mounted.
# - The stand-in's Python is Debian bookworm's python3 (3.11.x), not the official image's
#   patch release; paths differ (/usr/bin/python3 with python-is-python3). Good enough to
#   prove the Dockerfile steps, the installed environment and the component commands.
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
