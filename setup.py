"""Packaging glue: the top-level ``components/``, ``pipelines/`` and ``images/`` folders install
as ``gkeflow.components``, ``gkeflow.pipelines`` and ``gkeflow.images`` (everything else lives
in pyproject.toml). ``gkeflow.images`` carries the Dockerfiles and their hashed locks, so images
can be built from an installed package (``gkeflow.pipelines.targets.image_build``)."""

from setuptools import find_packages, setup

FOLDERS = ("components", "pipelines", "images")


def namespaced(folder: str) -> list[str]:
    return [f"gkeflow.{folder}"] + [f"gkeflow.{folder}.{sub}" for sub in find_packages(folder)]


setup(
    packages=[name for folder in FOLDERS for name in namespaced(folder)],
    package_dir={f"gkeflow.{folder}": folder for folder in FOLDERS},
    package_data={
        "gkeflow.images": ["*.Dockerfile", "*.lock", "*.sh"],
    },
)
