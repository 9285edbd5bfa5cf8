"""The commented ``gkeflow.yaml`` that `gkeflow init` writes (every section, valid as it
stands); tests load it through :func:`gkeflow.pipelines.settings.config.load_config`."""

#: What `gkeflow init` writes: every section, commented, valid as it stands.
EXAMPLE_CONFIG = '''\
# gkeflow.yaml: configuration as code for gkeflow (validated on every command).
# Keep it in git; secrets never go here, only the names of environment variables.

# Your container registry: `gkeflow images build` builds the CPU and GPU images into it
# (with your extra packages and code) and records their digests in the lock file; every
# compiled step then pulls them by digest. Paths are relative to this file.
# images:
#   registry: europe-west4-docker.pkg.dev/my-project/ml   # REGION-docker.pkg.dev/PROJECT/REPO
#   # tag: 0.1.0                         # default: the gkeflow version
#   # requirements: requirements.txt     # extra pip packages for every image
#   # include: [my_features, my_components.py]   # your packages/modules, importable in steps
#   # lock: gkeflow.lock                 # default: next to this file

# Per-step compute overrides (see `gkeflow compile --help`), e.g.:
# compute:
#   train-model: {accelerator: nvidia-l4, accelerator_count: 1, spot: true}
# Multi-node training on GKE (a JobSet; see docs/jobset.md): its pods run as their own
# Kubernetes service account, which needs no permission (deploy/rbac/jobset-worker.yaml):
#   train-model: {replicas: 4, worker_service_account: gkeflow-worker}

targets:
  # Kubeflow Pipelines on GKE: `gkeflow submit --target gke`.
  gke:
    host: https://kfp.example.com/pipeline   # the KFP API (and UI) URL
    namespace: kubeflow                      # your profile namespace on multi-user installs
    experiment: gkeflow                      # runs and schedules go here; created if missing
    # ui_url: https://kfp.example.com        # if the UI lives elsewhere than host
    # service_account: pipeline-runner       # Kubernetes service account for the runs
    # pipeline_root: gs://my-bucket/kfp-root
    auth:
      token_env: KFP_TOKEN                   # bearer token read from $KFP_TOKEN (never logged)
      # or: iap_client_id: 1234-abc.apps.googleusercontent.com   (IAP, Google credentials)
      # or: google: true                     (Google application-default credentials)
    timeout_s: 30                            # per request; 5xx/connection errors are retried
    retries: 4
    # cpu_machine_family: e2                 # node pools of CPU-only steps (their cost)
    # autopilot: false                       # true: GKE Autopilot (its request rules,
    #                                        # selectors and per-pod prices)

  # Vertex AI Pipelines: `gkeflow submit --target vertex`.
  vertex:
    project: my-project
    region: us-central1
    pipeline_root: gs://my-bucket/vertex-root
    service_account: pipelines@my-project.iam.gserviceaccount.com
    # network: projects/123456789/global/networks/my-vpc   # private services access
    # encryption_key: projects/my-project/locations/us-central1/keyRings/ml/cryptoKeys/pipelines
    labels:                                  # sanitised to Vertex's label rules
      team: ml-platform
    # enable_caching: false                  # default: as compiled (per step)
    timeout_s: 60
    retries: 4

# The GKE run's volume for prepared shards and checkpoints (KFP >= 2.14 workspace), used
# when targets.gke.pipeline_root is not gs:// (KFP's default MinIO root): the launcher then
# stages only shard manifests, never the dataset. Size it for the prepared data (about the
# input compressed) plus checkpoints; ReadWriteMany (e.g. standard-rwx, Filestore) lets
# parallel sweep trials share it across nodes.
# workspace:
#   size: 200Gi
#   storage_class: standard-rwo
#   access_mode: ReadWriteOnce
#   # enabled: false                       # default: on unless the GKE root is gs://

# The model families model_type auto (the default) trains, each in a step of its own,
# side by side (train-gbdt, train-mlp, ...); train-model keeps the best on the eval split.
# Default: gbdt, mlp, linear; one family compiles one train-model step. Their compute:
# compute.train-<family> (unset: train-model's for Keras, docs/training.md).
# candidates: [gbdt, mlp, linear]

# Data preparation in the training and sweep pipelines: one pod (default), or fanned out
# over groups of input files (or bq:// row ranges) for inputs of many millions of rows.
# preparation:
#   fanout: true
#   groups: 16                           # default of the prepare_groups pipeline parameter
#   parallelism: 8                       # group pods at once

# Serving the blessed, registered model at the end of training (docs/serving.md), per
# environment: a canary share first, then `gkeflow deploy promote`.
# deploy:
#   prod:
#     enabled: true
#     traffic: 10                        # percent for the new version; the rest stays put
#     keep: 1                            # previous versions kept deployed after a promote
#     min_replicas: 1
#     max_replicas: 2
#     # storage_root: gs://my-bucket/serving   # GKE: where KServe reads the model from

# When a run ends, a webhook message or (Vertex AI) email (docs/operating.md): per
# environment, or per schedule with its own notifications:. The URL lives in a secret.
# notifications:
#   prod:
#     when: failure                      # failure | success | always
#     webhook:
#       format: slack                    # generic | slack | google-chat
#       gke_secret: gkeflow-webhook      # Kubernetes Secret with key url
#       vertex_secret: projects/my-project/secrets/gkeflow-webhook
#   # or, Vertex AI only, mail on every end of a run: when: always, email: {recipients: [...]}
# retention:
#   days: 7                              # GKE: finished runs' pods and workspace (KFP >= 2.17)

# Cloud Monitoring alerts on idle GPUs, per environment (docs/costs.md):
# `gkeflow monitoring apply [--env prod]`.
# monitoring:
#   default:
#     project: my-project                # default: targets.vertex.project
#     notification_channels: [projects/my-project/notificationChannels/1234567890]
#     gpu_idle: {threshold_percent: 40, duration_minutes: 30}

# Experiment tracking per environment (docs/tracking.md): MLflow (local runs and the steps of
# compiled pipelines log to tracking_uri; GKE runs through Kubeflow Pipelines >= 2.17's MLflow
# plugin where it is there) and Vertex AI Experiments (Vertex AI runs are submitted into it,
# local runs log their parameters and metrics to it).
# tracking:
#   default:
#     mlflow:
#       experiment: penguins
#       tracking_uri: http://127.0.0.1:5000
#       # credentials: {token_env: MLFLOW_TOKEN}   # or username_env + password_env
#       # GKE: {gke_secret: mlflow-credentials}; Vertex AI: {vertex_secret: projects/P/secrets/S}
#     vertex_experiments:
#       experiment: penguins

# The most one run may cost at list prices, per environment (a schedule may set its own),
# and what a schedule's runs may cost in a month: `plan` shows the verdict; `submit` and
# `schedule apply` accept a run that fits and refuse one whose ceiling exceeds it unless
# --over-budget (docs/costs.md).
# budget:
#   default: {max_run_usd: 50}
#   prod: {max_run_usd: 400, max_month_usd: 5000}

# What runs really cost (`gkeflow runs cost RUN`): the Cloud Billing export to BigQuery.
# billing:
#   export_table: my-project.billing.gcp_billing_export_resource_v1_0123AB_4567CD_89EF01

# Pipeline parameters per environment: `gkeflow submit --env prod`.
# "default" is used when no --env is given; --param KEY=VALUE wins over these.
parameters:
  default:
    epochs: 20
  dev:
    epochs: 2
    min_accuracy: 0.5
  prod:
    epochs: 50
    min_accuracy: 0.9
    model_name: penguins-classifier

# Recurring runs: `gkeflow schedule apply` makes these real (idempotent).
# cron: 5 fields (minute hour day-of-month month day-of-week) in time_zone.
# On GKE, KFP runs crons in UTC: the time zone is converted with its current UTC offset;
# re-run `gkeflow schedule apply` after a daylight-saving change (see pipelines/settings/cron.py).
schedules:
  - name: nightly-training
    pipeline: training
    target: vertex
    cron: "0 2 * * *"
    time_zone: Europe/Berlin
    environment: prod
    parameters: {}                           # on top of parameters.<environment>
    max_concurrency: 1
    catch_up: false                          # do not backfill runs missed while paused
    enabled: true
  - name: weekly-training-gke
    target: gke
    cron: "30 6 * * 1"
    time_zone: UTC
    environment: prod
  - name: nightly-scoring                    # score the day's rows with the champion
    pipeline: prediction
    target: vertex
    cron: "0 4 * * *"
    time_zone: Europe/Berlin
    parameters:
      data_uri: gs://my-bucket/incoming/*.csv
      key_column: id
      output_uri: bq://my-project.scoring.penguins
      bq_write_mode: append
'''


#: Parts of the values ``gkeflow init`` writes that stand for the user's own.
PLACEHOLDERS = ("example.com", "my-project", "my-bucket", "1234-abc.apps")


def unfilled_placeholders(section: object, prefix: str = "") -> list[str]:
    """The keys of ``section`` (a parsed gkeflow.yaml section: a pydantic model, dict or
    list) whose values still hold one of :data:`PLACEHOLDERS`; the values are not shown."""
    if hasattr(section, "model_dump"):
        section = section.model_dump()
    found = []
    if isinstance(section, dict):
        for key, value in section.items():
            found += unfilled_placeholders(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(section, (list, tuple)):
        for index, value in enumerate(section):
            found += unfilled_placeholders(value, f"{prefix}.{index}")
    elif isinstance(section, str) and any(marker in section for marker in PLACEHOLDERS):
        found.append(prefix)
    return found
