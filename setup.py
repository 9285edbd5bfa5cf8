"""Packaging glue: the top-level ``components/`` and ``pipelines/`` folders install as
``gkeflow.components`` and ``gkeflow.pipelines`` (everything else lives in pyproject.toml)."""

from setuptools import find_packages, setup

FOLDERS = ("components", "pipelines")


def namespaced(folder: str) -> list[str]:
    return [f"gkeflow.{folder}"] + [f"gkeflow.{folder}.{sub}" for sub in find_packages(folder)]


setup(
    packages=[name for folder in FOLDERS for name in namespaced(folder)],
    package_dir={f"gkeflow.{folder}": folder for folder in FOLDERS},
)
