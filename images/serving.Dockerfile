# syntax=docker/dockerfile:1
# gkeflow serving image (gkeflow-serving): TensorFlow Serving of the TensorFlow the suite
# trains with, for Vertex AI, whose newest prebuilt TensorFlow prediction container (2.15)
# is older. Built by `gkeflow images build` into images.registry and pinned by digest in
# the lock; registration names it for models no prebuilt container serves.
#
# The release is the images' TensorFlow (tests check it against the locks and the table of
# known TensorFlow Serving releases, gkeflow.components.serving.serving_tags).
FROM docker.io/tensorflow/serving:2.21.0
# Vertex AI sets AIP_HTTP_PORT (the registered port, 8501) and AIP_STORAGE_URI (its copy
# of the model, gs://..., holding 1/saved_model.pb); TensorFlow Serving reads gs:// itself.
COPY --chmod=0755 serving-entrypoint.sh /usr/bin/gkeflow-serving-entrypoint.sh
RUN groupadd --gid 10001 gkeflow \
    && useradd --uid 10001 --gid gkeflow --no-create-home --shell /usr/sbin/nologin gkeflow
ENV MODEL_NAME=model
EXPOSE 8501
LABEL io.gkeflow.image=gkeflow-serving
USER 10001:10001
ENTRYPOINT ["/usr/bin/gkeflow-serving-entrypoint.sh"]
