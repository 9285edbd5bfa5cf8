#!/usr/bin/env bash
# The images issue's done-when, as a user meets it: the suite's wheel installed into a new
# venv in an empty directory, `gkeflow init`, a registry of the user's and a package of
# their own (include), `gkeflow images build --builder podman --no-push`, then `gkeflow
# compile`; prints the build time, the lock file, the digests each compiled pipeline pins
# and any file written into site-packages (there must be none).
#   bench/images_from_wheel.sh [WORKDIR]     (default: a new temporary directory)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work/wheel" "$work/project"
"$repo/.venv/bin/python" -m build --no-isolation --wheel --outdir "$work/wheel" "$repo" >/dev/null
cd "$work/project"
python3 -m venv venv
venv/bin/pip install -q "$work"/wheel/gkeflow-*.whl
site="$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
touch "$work/installed"
venv/bin/gkeflow init >/dev/null
sed -i 's|^# images:|images:|; s|^#   registry: .*|  registry: europe-west4-docker.pkg.dev/acme-ml/pipelines|; s|^#   # include: .*|  include: [team]|' gkeflow.yaml
mkdir -p team && touch team/__init__.py && echo 'def scale(x): return 2 * x' > team/features.py
start=$(date +%s)
venv/bin/gkeflow images build --builder podman --no-push >"$work/build.log" 2>&1
echo "images build: $(( $(date +%s) - start )) s"
cat gkeflow.lock
venv/bin/gkeflow compile --output out >/dev/null 2>&1
for target in gke vertex; do
  echo "training.$target.yaml pins:"
  grep -o 'acme-ml/pipelines/gkeflow-[a-z]*@sha256:[0-9a-f]*' "out/training.$target.yaml" | sort | uniq -c
done
echo "release registry still named: $(cat out/*.yaml | grep -c 'us-docker.pkg.dev/gkeflow' || true)"
echo "files written into site-packages: $(find "$site" -newer "$work/installed" -type f -not -name '*.pyc' | wc -l)"
