"""Pipeline definitions and their stages (``training``, ``sweep``, ``prediction``,
``preparation``, ``stages``, ``fanout``, ``deploy_stage``, ``operations``) and, below them,
the configuration they are built from (``config`` and the ``*_config`` modules, ``cron``,
``image_lock``, ``requirement_locks``, ``preparation_settings``); with three rooms beside
them: :mod:`.cli` (the ``gkeflow`` command), :mod:`.targets` (KFP on GKE, Vertex AI, local
runs, submit and schedule) and :mod:`.compute` (profiles, GPUs, capacity, engines, volumes).
Imports point one way, checked by import-linter:
``cli → targets → pipeline definitions → compute → configuration → components``.
"""
