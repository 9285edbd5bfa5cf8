"""Import what the steps import, once, at image build time (``python -m gkeflow.images.warm``).

Two jobs in one pass: the build fails, not a pipeline run, when the suite or the user's
code cannot be imported; and Python writes the bytecode of exactly the modules a step loads.
The packages are installed without bytecode (``pip --no-compile``), so the image carries no
compiled copy of the many modules no step ever imports, and no step compiles on start.

Arguments: files listing the user's module names (``images.include``), one per line.

In the slim image (``GKEFLOW_IMAGE_KIND=slim``, which has no TensorFlow) the pass imports
the component shells and the code path of every step declared for the slim image, with
TensorFlow blocked; a step whose code reaches TensorFlow, even through a lazy import inside
a function, fails the build with the chain of modules (:mod:`gkeflow.images.slim_check`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path

#: What a tracked step loads of MLflow (its client, the REST tracking store, the HTTP
#: artifact repository), only inside functions: imported here so it is compiled once at
#: build time instead of at every tracked step's start.
MLFLOW = ("mlflow", "mlflow.tracking", "mlflow.entities", "mlflow.store.tracking.rest_store",
          "mlflow.store.artifact.artifact_repository_registry",
          "mlflow.store.artifact.http_artifact_repo")
#: Loaded lazily by TensorFlow or only inside functions; imported here so they are compiled.
LAZY = ("keras", "tensorflow.keras.layers", "pyarrow.csv", "pyarrow.parquet",
        "pyarrow.compute", "pyarrow.dataset", "google.cloud.aiplatform", "kubernetes.client",
        *MLFLOW)


def suite_modules() -> list[str]:
    import gkeflow.components

    return [m.name for m in pkgutil.walk_packages(gkeflow.components.__path__,
                                                  "gkeflow.components.")]


#: What the slim image's steps load lazily (no TensorFlow, no Keras).
SLIM_LAZY = ("pyarrow.csv", "pyarrow.parquet", "pyarrow.compute", "pyarrow.dataset",
             "google.cloud.aiplatform", "kubernetes.client", *MLFLOW)


def slim_modules() -> tuple[list[str], list[str]]:
    """The modules the slim image's steps load, and one line per step that would load
    TensorFlow."""
    from gkeflow.components.images import SLIM_IMAGE
    from gkeflow.images import slim_check

    shells = sorted({name.split(":")[0] for name, _ in slim_check.components()})
    roots = set().union(*slim_check.slim_roots(SLIM_IMAGE).values())
    modules, _ = slim_check.code_path(roots)
    return [*shells, *modules], slim_check.problems(SLIM_IMAGE)


def user_modules(files: list[str]) -> list[str]:
    return [name for file in files for name in Path(file).read_text(encoding="utf-8").split()]


def main(argv: list[str]) -> int:
    if os.environ.get("GKEFLOW_IMAGE_KIND") == "slim":
        return main_slim(argv)
    names = [*suite_modules(), *LAZY, *user_modules(argv)]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure fails the build, with its module
            print(f"cannot import {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    print(f"imported {len(names)} gkeflow and user modules ({len(sys.modules)} in all)")
    return 0


def main_slim(argv: list[str]) -> int:
    """The slim image's pass: the slim steps' code paths, TensorFlow blocked."""
    from gkeflow.images import slim_check

    try:
        with slim_check.tensorflow_blocked():
            names, problems = slim_modules()
    except Exception as exc:  # noqa: BLE001 - a shell that cannot load fails the build
        print(f"cannot read the slim steps: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        return 1
    names = [*names, *SLIM_LAZY]
    failed = slim_check.import_blocking(names)
    if failed:
        print(f"cannot import {failed}", file=sys.stderr)
        return 1
    for name in user_modules(argv):
        # a model module of the user's may need TensorFlow: it runs only in the CPU and GPU
        # images' steps (train-model's user_module), so here it is left out, not a failure
        needs = slim_check.needs_tensorflow(name)
        if needs:
            print(f"note: {name} imports {needs}: usable in the CPU and GPU images' steps "
                  "only, not in the slim image's")
            continue
        failed = slim_check.import_blocking([name])
        if failed:
            print(f"cannot import {failed}", file=sys.stderr)
            return 1
        names.append(name)
    loaded = sorted(n for n in sys.modules if n.split(".")[0] in slim_check.TENSORFLOW)
    if loaded:
        print(f"TensorFlow was loaded ({loaded[0]}) by the slim steps' modules", file=sys.stderr)
        return 1
    print(f"imported {len(names)} modules of the slim steps and the user ({len(sys.modules)} "
          "in all), no TensorFlow")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
