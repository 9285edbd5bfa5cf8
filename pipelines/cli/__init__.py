"""The ``gkeflow`` command: ``main`` only assembles the group; each command or command group
has its own module (``run``, ``compile``, ``docs``, ``plan``, ``models``, ``ship``
init/submit/schedule, ``images``, ``runs``, ``deploy``, ``monitoring``, ``prices``). Below
them: ``common`` (console, config loading, the ``--config``/``--compute`` options, compute
per step, one-line remote errors), ``summary``, the checks of ``gkeflow run`` arguments and
the one-line error reporting (``errors``). No module here imports ``main``.

May import :mod:`gkeflow.pipelines` (definitions, config), :mod:`~gkeflow.pipelines.targets`,
:mod:`~gkeflow.pipelines.compute` and :mod:`gkeflow.components`; nothing imports it.
"""
