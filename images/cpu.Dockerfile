# gkeflow CPU image: Python 3.11, TensorFlow (CPU), kfp and the gkeflow suite.
# Runs data preparation, evaluation and registration. Built from the repository root:
#   docker build -f images/cpu.Dockerfile -t <registry>/gkeflow-cpu:<version> .
# Everything is installed at build time; the final image has no pip index configured.

FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY components ./components
COPY pipelines ./pipelines
RUN python -m venv /opt/gkeflow \
    && /opt/gkeflow/bin/pip install --no-cache-dir ./

FROM python:3.11.11-slim-bookworm
RUN groupadd --gid 10001 gkeflow \
    && useradd --uid 10001 --gid gkeflow --create-home --shell /usr/sbin/nologin gkeflow
COPY --from=build /opt/gkeflow /opt/gkeflow
ENV PATH=/opt/gkeflow/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_INDEX=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_CPP_MIN_LOG_LEVEL=1
# Fail the build, not a pipeline run, when the suite cannot be imported.
RUN python -c "import kfp, tensorflow, gkeflow.components.train.logic, gkeflow.components.register.logic"
USER 10001:10001
WORKDIR /home/gkeflow
