"""The suite's image recipes, shipped inside the package (``gkeflow.images``).

``slim.Dockerfile`` (no TensorFlow), ``cpu.Dockerfile`` and ``gpu.Dockerfile`` with their
hashed locks (``requirements-slim.lock``, ``requirements-cpu.lock``,
``requirements-gpu.lock``); ``gkeflow.pipelines.targets.image_build``
assembles a build context from them wherever gkeflow is installed.
"""
