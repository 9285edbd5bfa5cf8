"""Pipeline definitions and their stages (``training``, ``sweep``, ``prediction``,
``preparation``, ``stages``, ``fanout``) and the configuration they are built from
(``config``), with three rooms beside them: :mod:`.cli` (the ``gkeflow`` command),
:mod:`.targets` (KFP on GKE, Vertex AI, local runs, submit and schedule) and :mod:`.compute`
(profiles, GPUs, capacity, engines, volumes). Imports point one way:
``cli → targets, pipelines → compute → components``. Two small exceptions: ``config``
checks schedule cron expressions and pipeline names with :mod:`.targets.cron` and
:mod:`.targets.compile` (imported lazily), and :mod:`.compute.engines.vizier` reads
the search space from ``sweep_config``.
"""
