"""Import what the steps import, once, at image build time (``python -m gkeflow.images.warm``).

Two jobs in one pass: the build fails, not a pipeline run, when the suite or the user's
code cannot be imported; and Python writes the bytecode of exactly the modules a step loads.
The packages are installed without bytecode (``pip --no-compile``), so the image carries no
compiled copy of the many modules no step ever imports, and no step compiles on start.

Arguments: files listing the user's module names (``images.include``), one per line.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

#: Loaded lazily by TensorFlow or only inside functions; imported here so they are compiled.
LAZY = ("keras", "tensorflow.keras.layers", "pyarrow.csv", "pyarrow.parquet",
        "pyarrow.compute", "pyarrow.dataset", "google.cloud.aiplatform", "kubernetes.client")


def suite_modules() -> list[str]:
    import gkeflow.components

    return [m.name for m in pkgutil.walk_packages(gkeflow.components.__path__,
                                                  "gkeflow.components.")]


def user_modules(files: list[str]) -> list[str]:
    return [name for file in files for name in Path(file).read_text(encoding="utf-8").split()]


def main(argv: list[str]) -> int:
    names = [*suite_modules(), *LAZY, *user_modules(argv)]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure fails the build, with its module
            print(f"cannot import {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    print(f"imported {len(names)} gkeflow and user modules ({len(sys.modules)} in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
