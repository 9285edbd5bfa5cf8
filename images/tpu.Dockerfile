# syntax=docker/dockerfile:1
# gkeflow TPU image: Python 3.11, JAX for Cloud TPUs (jax and the TPU runtime libtpu that
# jax[tpu] names) under Keras 3, the CPU image's TensorFlow (tensorflow-cpu: the input pipeline
# and the SavedModel export), kfp and the gkeflow suite, plus the user's extra packages and
# code. Runs training on TPU VMs (GKE TPU node pools and Vertex AI), one slice or many; without
# a TPU, JAX runs on the CPU.
#
# Built from a context that gkeflow.pipelines.targets.image_build assembles (`gkeflow images build`):
#   requirements.lock  every package pinned with its hashes (images/requirements-tpu.lock)
#   dist/              the gkeflow wheel         user/  extra requirements and included code
# Layers go from the least to the most often changed: locked packages, extra packages, the
# suite, the user's code. Nothing is resolved at build time and nothing at run time; the
# final image has no pip index configured, no build tools and no caches.

FROM python:3.11.11-slim-bookworm AS locked
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# binutils strips the native libraries' symbol tables (prune.sh); it stays in this stage.
# libtpu (the TPU runtime) is left as published: it cannot be tried here without a TPU.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends binutils \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock build.lock prune.sh /tmp/
# The base image's pip installs into a venv that has no pip or setuptools of its own. The
# few packages published only as source (kfp-server-api) are built here, in this stage only,
# with the lock's own setuptools and wheel (build.lock), not whatever the index serves.
# Nothing is compiled to bytecode here: warm.py compiles what the steps import.
# The .pth file puts the user's code (images.include) on sys.path.
RUN python -m venv --without-pip /opt/gkeflow \
    && python -m pip --python /opt/gkeflow/bin/python install --require-hashes --no-deps \
       --no-compile -r /tmp/build.lock \
    && python -m pip --python /opt/gkeflow/bin/python install --require-hashes --no-deps \
       --no-compile --no-build-isolation -r /tmp/requirements.lock \
    && site="$(/opt/gkeflow/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
    && sh /tmp/prune.sh "$site" "$site/libtpu" \
    && echo /opt/gkeflow/user > "$site/gkeflow-user.pth"

FROM python:3.11.11-slim-bookworm
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN groupadd --gid 10001 gkeflow \
    && useradd --uid 10001 --gid gkeflow --create-home --shell /usr/sbin/nologin gkeflow
COPY --from=locked /opt/gkeflow /opt/gkeflow
# Extra packages (images.requirements), held to the lock's versions. The inputs are
# copied, not bind-mounted: a copied file is part of the layer cache key, so a changed
# requirement or suite rebuilds its layer instead of reusing a stale one.
COPY user/requirements.txt user/constraints.txt user/modules.txt /tmp/gkeflow-user/
# Package-index credentials arrive as a build secret (a file of `export VAR=...` lines for
# the ${VAR} that requirements.txt names): mounted for this step only, never in a layer.
RUN --mount=type=secret,id=gkeflow-pip-env \
    if [ -s /tmp/gkeflow-user/requirements.txt ]; then \
      if [ -f /run/secrets/gkeflow-pip-env ]; then . /run/secrets/gkeflow-pip-env; fi \
      && python -m pip --python /opt/gkeflow/bin/python install --no-cache-dir \
        -c /tmp/gkeflow-user/constraints.txt -r /tmp/gkeflow-user/requirements.txt; \
    fi
# The suite itself, from its wheel, without re-resolving anything.
COPY dist/ /tmp/gkeflow-dist/
RUN python -m pip --python /opt/gkeflow/bin/python install --no-deps --no-index \
      --no-cache-dir --no-compile /tmp/gkeflow-dist/gkeflow-*.whl \
    && rm -rf /tmp/gkeflow-dist
# The user's modules and packages (images.include), on sys.path through gkeflow-user.pth.
COPY user/include/ /opt/gkeflow/user/
ENV PATH=/opt/gkeflow/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_INDEX=1 \
    TF_CPP_MIN_LOG_LEVEL=1
# Fail the build, not a pipeline run, when the suite or the user's code cannot be imported;
# the same pass writes the bytecode of what the steps import, and only that (warm.py).
# TPU_SKIP_MDS_QUERY: importing TensorFlow for TPUs asks the GCE metadata server about the TPU
# VM; a build has none, so this pass alone skips the query (a TPU VM's steps keep it).
# libtpu creates /tmp/tpu_logs on import: removed, or the steps' user could not write it.
RUN HOME=/nonexistent TPU_SKIP_MDS_QUERY=1 python -m gkeflow.images.warm \
      /tmp/gkeflow-user/modules.txt \
    && rm -rf /tmp/gkeflow-user /tmp/tpu_logs
USER 10001:10001
WORKDIR /home/gkeflow
# Marks the image as gkeflow's own: a rebuild removes the previous, now untagged one
# (`podman|docker image prune --filter label=io.gkeflow.image=gkeflow-tpu`), nothing else.
LABEL io.gkeflow.image=gkeflow-tpu
