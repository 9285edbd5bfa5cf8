"""Loaded by every Python process the tests start (tests/conftest.py puts this folder first on
PYTHONPATH), so the steps run with what the images install, not with the dev environment's
extras. scikit-learn and matplotlib come with the full MLflow that serves the tracking tests;
the images hold neither (tests/unit/test_step_site.py checks the locks), and Keras imports
both at start when they are there: about a second of every TensorFlow process. The pytest
processes themselves keep them (tests/conftest.py): in-process tests draw MLflow's plots.
kfp.local's steps hand themselves to the tests' fork server when there is one
(step_zygote.py)."""

import os
import sys

HIDDEN = ("sklearn", "matplotlib")


def hide(names=HIDDEN) -> None:
    for name in names:
        sys.modules.setdefault(name, None)  # `import sklearn` raises ImportError, as in the images


if __name__ == "sitecustomize":
    hide()
    if os.environ.get("GKEFLOW_STEP_ZYGOTE"):  # a step forked from the tests' server
        import step_zygote

        step_zygote.delegate()
