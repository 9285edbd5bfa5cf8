"""The ``gkeflow`` command: one module per command group (``main`` holds the group and the
local commands; ``ship`` submit/schedule/init; ``sweep`` the sweep run), with the checks of
``gkeflow run`` arguments and the one-line error reporting (``errors``).

May import :mod:`gkeflow.pipelines` (definitions, config), :mod:`~gkeflow.pipelines.targets`,
:mod:`~gkeflow.pipelines.compute` and :mod:`gkeflow.components`; nothing imports it.
"""
