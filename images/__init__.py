"""The suite's image recipes, shipped inside the package (``gkeflow.images``).

``cpu.Dockerfile`` and ``gpu.Dockerfile`` with their hashed locks
(``requirements-cpu.lock``, ``requirements-gpu.lock``); ``gkeflow.pipelines.targets.image_build``
assembles a build context from them wherever gkeflow is installed.
"""
