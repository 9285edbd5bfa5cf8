#!/bin/sh
# Removes from the images' Python environment what no gkeflow step runs, then strips the
# native libraries' symbol tables. Run once, in the build stage, on /opt/gkeflow.
#   prune.sh SITE_PACKAGES [PATH_NOT_TO_STRIP ...]
# Removed: TensorFlow's C++ headers (for compiling custom ops); the test suites of numpy,
# pandas and pyarrow; pyarrow's Flight RPC, S3 file system and C++ test helpers (pyarrow
# imports them only on request; its Substrait library stays: every pyarrow extension links
# it), its Cython sources, and the two copies of
# libarrow_python.so that only a build links against (symbolic links to the loaded one
# instead); numpy's C headers, distutils and f2py (for building extensions; f2py stays where
# SciPy is installed, as in the TPU image for JAX: SciPy's array API layer runs
# `from numpy import *`, which loads it); type stubs
# (*.pyi, read by type checkers only); TensorBoard's web data server (a standalone binary the
# tensorboard command starts). Libraries auditwheel vendored into *.libs/ stay as
# published: stripping breaks them. The GPU image passes its CUDA wheels as paths not to
# strip.
# Removed from every image too: the generative AI, agent and Ray parts of the Vertex AI SDK
# (vertexai, agentplatform, vertex_ray): no step loads them (`import google.cloud.aiplatform`
# does not; the build's import pass runs without them) and google-genai, which they need,
# is in no lock (image_locks.NOT_INSTALLED); and the build backend (setuptools, wheel,
# image_locks.BUILD_BACKEND), which only built the source-only packages a step earlier: no
# step imports it, and the user's extra packages build in pip's own isolated environment.
# Removed from the slim image only (GKEFLOW_IMAGE_KIND=slim): the asynchronous REST
# transports of the Vertex AI API clients (aiplatform_v1*/services/*/transports/
# rest_asyncio.py, 35 MB with their bytecode). The clients import them inside
# `try/except ImportError` and then offer grpc, grpc_asyncio and rest; the SDK picks
# rest_asyncio only for async clients given async REST credentials, which no step sets
# (slim_check.SLIM_PRUNED, tests/unit/test_slim_image.py).
set -eu
site="$1"
shift
rm -rf "$site/tensorflow/include" "$site/pandas/tests" "$site/pyarrow/tests" \
       "$site/pyarrow/include" "$site/pyarrow/src" "$site/pyarrow/includes" \
       "$site/tensorboard_data_server/bin" "$site/numpy/_core/include" \
       "$site/numpy/distutils"
if [ ! -d "$site/scipy" ]; then
    rm -rf "$site/numpy/f2py"
fi
find "$site/numpy" -type d -name tests -prune -exec rm -rf {} +
rm -f "$site"/pyarrow/_flight.* "$site"/pyarrow/libarrow_flight.so* \
      "$site"/pyarrow/libarrow_python_flight.so* "$site"/pyarrow/_s3fs.* \
      "$site"/pyarrow/libarrow_s3.so* "$site"/pyarrow/_pyarrow_cpp_tests.*
find "$site/pyarrow" -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' \) -delete
find "$site" -type f -name '*.pyi' -delete
# libarrow_python.so.NNNN is what pyarrow's extensions load (their DT_NEEDED); the wheel
# ships the unversioned and fully versioned names as copies of it
for loaded in "$site"/pyarrow/libarrow_python.so.[0-9]*; do
    case "$loaded" in *.so.*.*) continue ;; esac
    for copy in "$site/pyarrow/libarrow_python.so" "$loaded".*; do
        if [ -f "$copy" ] && [ ! -L "$copy" ] && cmp -s "$copy" "$loaded"; then
            ln -sf "$(basename "$loaded")" "$copy"
        fi
    done
done
rm -rf "$site/vertexai" "$site/agentplatform" "$site/vertex_ray" \
       "$site/google/cloud/aiplatform/vertex_ray"
# nvidia-ml-py (the utilisation sampler's NVML binding, pynvml) also installs its demo script
# as a top-level module named `example`, which would shadow a user's module of that name
if grep -qs '^example.py,' "$site"/nvidia_ml_py-*.dist-info/RECORD; then
    rm -f "$site/example.py"
fi
if [ "${GKEFLOW_IMAGE_KIND:-}" = slim ]; then
    find "$site"/google/cloud/aiplatform_v1* -path '*/services/*/transports/rest_asyncio.py' \
        -delete
fi
venv="$(dirname "$(dirname "$(dirname "$site")")")"  # SITE: VENV/lib/python3.X/site-packages
if [ -x "$venv/bin/python" ]; then
    python -m pip --python "$venv/bin/python" uninstall --yes --quiet setuptools wheel
fi
keep=""
for path in "$@"; do
    keep="$keep -not -path $path/*"
done
set -f  # the patterns in $keep are find's, not the shell's
# shellcheck disable=SC2086 # $keep is a list of find arguments
find "$site" -type f \( -name '*.so' -o -name '*.so.[0-9]*' \) -not -path '*.libs/*' \
    $keep -exec strip --strip-unneeded {} +
