"""Notifications and retention compiled into a pipeline (see
:mod:`gkeflow.pipelines.settings.operations_config` for the gkeflow.yaml sections).

:func:`select` picks the notification settings of one submit (``--env``) or one schedule
(its own, else its environment's) and returns the config carrying them; the pipeline
builders take :class:`Operations` from :func:`of` and change by two lines: the body is
decorated with :meth:`Operations.wrap` (a ``dsl.ExitHandler`` whose exit task receives
``dsl.PipelineTaskFinalStatus``; with tracking and no notifications it only writes the
run's end into the trackers) and the pipeline config passes through
:meth:`Operations.pipeline_config` (retention as PipelineConfig time-to-live on GKE). With
no notifications, tracking or retention both are the identity, so the default compiled
pipelines stay as they are.
"""

from __future__ import annotations

import functools
import inspect
import json
from dataclasses import dataclass
from pathlib import Path

from gkeflow.pipelines.settings.operations_config import NotificationSettings, RetentionSettings
from gkeflow.pipelines.settings.platforms import platform

#: Where the exit task reads a GKE run's task details: the in-cluster KFP API service.
KFP_IN_CLUSTER_API = "http://ml-pipeline.kubeflow:8888"
#: Where it reads the registered version: ML Metadata's in-cluster gRPC-Web envoy.
KFP_IN_CLUSTER_METADATA = "http://metadata-envoy-service.kubeflow:9090"
#: The label Kubeflow's ``access-ml-pipeline`` PodDefault selects (a run-API token).
RUN_API_ACCESS_LABEL = "access-ml-pipeline"
_SIMPLE = (str, int, float, bool)


@dataclass(frozen=True)
class Operations:
    """What one compiled pipeline carries besides its steps."""

    target: str
    notifications: NotificationSettings | None = None
    retention: RetentionSettings = RetentionSettings()
    link_template: str = ""
    run_api: str = ""
    price_region: str = ""
    price_directory: str = ""  # where the refreshed price cache lives (gkeflow.yaml's folder)
    #: How GKE bills a CPU step (``derived_rates.Cluster``; None: e2 node pools).
    price_cluster: object = None
    step_rates: str = "{}"
    #: ``tracking.<env>`` compiled into the tracked steps (docs/tracking.md), or None.
    tracking: object = None
    #: gkeflow.yaml's ``targets.vertex`` (the project of a GKE run's Vertex AI experiment).
    vertex_target: object = None

    def track(self, task, step: str, pipeline: str):
        """``task`` with the MLflow settings of direct mode (:mod:`tracking_tasks`)."""
        from gkeflow.pipelines.definitions.tracking_tasks import track_task

        return track_task(task, step, self.tracking, self.target, pipeline, self.link_template,
                          self.vertex_target)

    def registry_default(self, fallback: str) -> str:
        """The pipeline's default ``registry_uri``: MLflow's when tracked there."""
        from gkeflow.pipelines.definitions.tracking_tasks import registry_default

        return registry_default(self.tracking, fallback)

    def priced(self, profiles) -> Operations:
        """These operations with each step's hourly list price (of ``profiles``, the steps'
        compute) compiled in, for the notification to give the run's cost; unchanged
        without a webhook notification or for local runs."""
        if (self.notifications is None or self.notifications.email is not None
                or not platform(self.target).cloud):
            return self
        from dataclasses import replace

        from gkeflow.pipelines.compute.costing import DEFAULT_REGION, run_cost, step_rates
        from gkeflow.pipelines.compute.prices import current_prices

        run = run_cost(profiles, self.target, self.price_region or DEFAULT_REGION,
                       cluster=self.price_cluster,
                       prices=current_prices(Path(self.price_directory) if self.price_directory
                                             else None))
        return replace(self, step_rates=json.dumps(step_rates(run), sort_keys=True))

    def pipeline_config(self, config):
        """``config`` (a ``dsl.PipelineConfig`` or None) with the retention's TTL on GKE."""
        if not platform(self.target).kubernetes or not self.retention.days:
            return config
        from kfp import dsl

        config = config or dsl.PipelineConfig()
        config.ttl_seconds_after_finished = self.retention.days * 86400
        return config

    def wrap(self, pipeline_name: str):
        """Decorator for a pipeline function: its body inside an exit handler that notifies
        and writes the run's end into its trackers; the function unchanged without
        notifications or tracking."""
        def decorate(func):
            if self.notifications is None and not self.ends_tracking():
                return func
            signature = inspect.signature(func)

            @functools.wraps(func)
            def body(*args, **kwargs):
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                exit_task = self._exit_task(pipeline_name, signature, bound.arguments)
                from kfp import dsl

                with dsl.ExitHandler(exit_task, name="run"):
                    return func(*args, **kwargs)

            return body

        return decorate

    def ends_tracking(self) -> bool:
        """Whether the run's end is written into its trackers by the exit task."""
        from gkeflow.pipelines.definitions.tracking_tasks import ends_tracking

        return ends_tracking(self.tracking, self.target, self.vertex_target)

    def _exit_task(self, pipeline_name: str, signature, arguments: dict):
        from gkeflow.pipelines.definitions.tracking_tasks import track_exit_task

        settings = self.notifications
        if settings is None or settings.email is None:
            task = (self._notify_task(pipeline_name, signature, arguments) if settings
                    else self._end_tracking_task())
            return track_exit_task(task, self.tracking, self.target, pipeline_name,
                                   self.link_template, self.vertex_target)
        # Vertex AI's own email task: the run's end is not written into the trackers
        from gkeflow.components.notify.email import vertex_notification_email

        task = vertex_notification_email(recipients=list(settings.email.recipients))
        return task.set_display_name("Email").set_caching_options(False)

    def _end_tracking_task(self):
        from kfp import dsl

        from gkeflow.components.tracking.component import end_tracking

        task = end_tracking(target=platform(self.target).runtime,
                            run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                            run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER, run_api=self.run_api,
                            metadata_api=KFP_IN_CLUSTER_METADATA if platform(self.target).kubernetes
                            else "")
        task.set_display_name("End tracking").set_caching_options(False)
        # multi-user Kubeflow: a run-API token (see _notify_task)
        if platform(self.target).kubernetes:
            from kfp import kubernetes

            kubernetes.add_pod_label(task, RUN_API_ACCESS_LABEL, "true")
        return task

    def _notify_task(self, pipeline_name: str, signature, arguments: dict):
        from kfp import dsl

        from gkeflow.components.notify.component import notify_run
        from gkeflow.components.notify.logic import ITEM_SEP, KV_SEP, WEBHOOK_ENV

        settings = self.notifications
        simple = {n: p for n, p in signature.parameters.items() if p.annotation in _SIMPLE
                  or p.annotation in {t.__name__ for t in _SIMPLE}}
        defaults = {n: p.default for n, p in simple.items()
                    if p.default is not inspect.Parameter.empty}
        parameters = ITEM_SEP.join(f"{name}{KV_SEP}{arguments[name]}" for name in simple)
        secret = settings.webhook.secret_for(self.target)
        task = notify_run(
            pipeline=pipeline_name, target=platform(self.target).runtime,
            run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            link_template=self.link_template, when=settings.when,
            webhook_format=settings.webhook.format, webhook_env=WEBHOOK_ENV,
            webhook_secret=secret if platform(self.target).managed else "",
            parameters=parameters, defaults=json.dumps(defaults, sort_keys=True),
            run_api=self.run_api,
            metadata_api=KFP_IN_CLUSTER_METADATA if platform(self.target).kubernetes else "",
            step_rates=self.step_rates)
        task.set_display_name("Notify").set_caching_options(False)
        if platform(self.target).kubernetes:
            from kfp import kubernetes

            name, _, key = secret.partition("/")
            kubernetes.use_secret_as_env(task, secret_name=name,
                                         secret_key_to_env={key or "url": WEBHOOK_ENV})
            # Multi-user Kubeflow: the PodDefault of deploy/kubeflow/access-ml-pipeline.yaml
            # gives pods with this label a token for the run API (the failed step's error).
            kubernetes.add_pod_label(task, RUN_API_ACCESS_LABEL, "true")
        return task


def select(config, environment: str = "default", schedule=None):
    """``config`` carrying the notifications of one submit or schedule: the schedule's own,
    else those of its (or ``environment``'s) ``notifications.<environment>``."""
    if schedule is not None:
        settings = schedule.notifications or config.notifications.get(schedule.environment)
    else:
        settings = config.notifications.get(environment)
    chosen = config.model_copy()
    chosen._notify = settings
    from gkeflow.pipelines.settings.tracking_config import tracking_for

    chosen._tracking = tracking_for(
        config.tracking, schedule.environment if schedule is not None else environment)
    return chosen


#: Said wherever an email notification is compiled in: Vertex AI writes the mail itself.
EMAIL_HAS_NO_COST = ("notification: Vertex AI composes the email itself (the run's state and "
                     "a link), so it carries no cost; a webhook notification carries the "
                     "run's list-price cost, `gkeflow runs cost RUN` the billed one")


def notification_notes(config, target: str) -> list[str]:
    """What the notification ``config`` carries (from :func:`select`) will not say on
    ``target``."""
    settings = getattr(config, "_notify", None)
    if platform(target).managed and settings is not None and settings.email is not None:
        return [EMAIL_HAS_NO_COST]
    return []


def notifications_key(config) -> str:
    """The notifications and MLflow tracking ``config`` carries (from :func:`select`) as
    canonical JSON: equal settings give equal keys ("" for none), whatever lists they hold."""
    settings = getattr(config, "_notify", None)
    tracking = getattr(config, "_tracking", None)
    if settings is None and (tracking is None or tracking == type(tracking)()):
        return ""
    # tracking.<env> is compiled in too: environments tracked apart compile apart
    return json.dumps({"notify": settings.model_dump(mode="json") if settings else None,
                       "tracking": tracking.model_dump(mode="json") if tracking else None},
                      sort_keys=True)


def of(config, target: str) -> Operations:
    """The :class:`Operations` a builder compiles for ``target`` from ``config`` (None:
    nothing)."""
    if config is None:
        return Operations(target)
    settings = getattr(config, "_notify", None)
    link, api = "", ""
    if platform(target).kubernetes and config.targets.gke is not None:
        gke = config.targets.gke
        link = f"{gke.ui_url or gke.host}/#/runs/details/{{run_id}}"
        api = KFP_IN_CLUSTER_API
    elif platform(target).managed and config.targets.vertex is not None:
        vertex = config.targets.vertex
        link = (f"https://console.cloud.google.com/vertex-ai/locations/{vertex.region}/"
                f"pipelines/runs/{{run_name}}?project={vertex.project}")
        api = vertex.api_endpoint or f"https://{vertex.region}-aiplatform.googleapis.com"
        if not api.startswith("http"):
            api = f"https://{api}"
    if settings is not None:
        from gkeflow.pipelines.settings.config import ConfigError

        try:
            settings.check_target(target)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    tracking = getattr(config, "_tracking", None)
    mlflow = getattr(tracking, "mlflow", None)
    if mlflow is not None and (reason := mlflow.unreachable_from(target)):
        from gkeflow.pipelines.settings.config import ConfigError

        raise ConfigError(reason)
    from gkeflow.pipelines.compute.costing import price_region
    from gkeflow.pipelines.compute.derived_rates import Cluster
    from gkeflow.pipelines.settings.config import config_directory

    gke = config.targets.gke
    cluster = Cluster(gke.cpu_machine_family, gke.autopilot) if gke is not None else None
    return Operations(target, settings, config.retention, link, api, price_region(config),
                      price_directory=str(config_directory(config)), price_cluster=cluster,
                      tracking=getattr(config, "_tracking", None),
                      vertex_target=config.targets.vertex)
