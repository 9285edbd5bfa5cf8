"""Where pipelines run: compiling per target, Kubeflow Pipelines on GKE (``kfp``), Vertex AI
Pipelines (``vertex``), ``kfp.local`` on this machine (``local``), submitting runs, schedules and
their cron conversion, and the transport under them (retries, timeouts, credentials).

May import :mod:`gkeflow.pipelines` (definitions, config), :mod:`~gkeflow.pipelines.compute` and
:mod:`gkeflow.components`; never :mod:`~gkeflow.pipelines.cli`.
"""
