#!/bin/sh
# Removes from the images' Python environment what no gkeflow step runs, then strips the
# native libraries' symbol tables. Run once, in the build stage, on /opt/gkeflow.
#   prune.sh SITE_PACKAGES [PATH_NOT_TO_STRIP ...]
# Removed: TensorFlow's C++ headers (for compiling custom ops); the test suites of numpy,
# pandas and pyarrow; pyarrow's Flight RPC, S3 file system and C++ test helpers (pyarrow
# imports them only on request); TensorBoard's web data server (a standalone binary the
# tensorboard command starts). Libraries auditwheel vendored into *.libs/ stay as published:
# stripping breaks them. The GPU image passes its CUDA wheels as paths not to strip.
set -eu
site="$1"
shift
rm -rf "$site/tensorflow/include" "$site/pandas/tests" "$site/pyarrow/tests" \
       "$site/pyarrow/include" "$site/pyarrow/src" "$site/tensorboard_data_server/bin"
find "$site/numpy" -type d -name tests -prune -exec rm -rf {} +
rm -f "$site"/pyarrow/_flight.* "$site"/pyarrow/libarrow_flight.so* \
      "$site"/pyarrow/libarrow_python_flight.so* "$site"/pyarrow/_s3fs.* \
      "$site"/pyarrow/libarrow_s3.so* "$site"/pyarrow/_pyarrow_cpp_tests.*
keep=""
for path in "$@"; do
    keep="$keep -not -path $path/*"
done
set -f  # the patterns in $keep are find's, not the shell's
# shellcheck disable=SC2086 # $keep is a list of find arguments
find "$site" -type f \( -name '*.so' -o -name '*.so.[0-9]*' \) -not -path '*.libs/*' \
    $keep -exec strip --strip-unneeded {} +
