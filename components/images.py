"""The suite's container images, declared once.

Every component runs in one of these images; they contain the ``gkeflow``
package (and so kfp), so no step installs anything at run time.
"""

from __future__ import annotations

REGISTRY = "us-docker.pkg.dev/gkeflow/images"
VERSION = "0.1.0"

#: Python 3.11, TensorFlow (CPU), kfp and the suite: data preparation, evaluation, registration.
CPU_IMAGE = f"{REGISTRY}/gkeflow-cpu:{VERSION}"
#: The same with TensorFlow built for CUDA: training on GPUs.
GPU_IMAGE = f"{REGISTRY}/gkeflow-gpu:{VERSION}"
