"""Image mapping for pipelines of your own: a YAML compiled with kfp directly gets the
registry and digests of gkeflow.yaml's ``images:``, as ``gkeflow compile`` output does."""

from __future__ import annotations

from pathlib import Path

from gkeflow.components.images import map_references
from gkeflow.pipelines.settings.config import load_config
from gkeflow.pipelines.settings.images_config import ImagesConfig, image_map


def map_compiled_file(path: Path | str, images: ImagesConfig | None = None) -> Path:
    """Apply the image mapping to a pipeline or component YAML compiled with kfp directly
    (a pipeline of your own around gkeflow's components), in place; returns ``path``.

    Args:
        path: The compiled YAML file.
        images: The ``images:`` section; default: ./gkeflow.yaml's.
    """
    if images is None:
        images = load_config().images
    path = Path(path)
    path.write_text(map_references(path.read_text(encoding="utf-8"), image_map(images)),
                    encoding="utf-8")
    return path
