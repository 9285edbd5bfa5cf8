"""Which Keras backend trains a step: TensorFlow, or JAX (Cloud TPUs, one slice or many).

Keras reads ``KERAS_BACKEND`` once, when it is first imported, so the choice is made at
the start of the step (:func:`select_backend`) before anything imports Keras. ``auto``
picks JAX where the step has a TPU and TensorFlow elsewhere. A user model module that
calls TensorFlow directly cannot train on JAX: :func:`tensorflow_calls` finds those calls
so the run is refused before any step, naming them.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Mapping
from pathlib import Path

BACKENDS = ("auto", "tensorflow", "jax")


class BackendError(ValueError):
    """The backend asked for cannot train this step."""


def check_backend(setting: str) -> str:
    if setting not in BACKENDS:
        raise BackendError(f"backend must be one of {', '.join(BACKENDS)}; got {setting!r}")
    return setting


def resolve_backend(setting: str, on_tpu: bool) -> str:
    """``auto`` -> ``jax`` on a TPU, ``tensorflow`` elsewhere; the others as they are."""
    check_backend(setting)
    if setting == "auto":
        return "jax" if on_tpu else "tensorflow"
    return setting


def select_backend(setting: str, env: Mapping[str, str] | None = None) -> str:
    """Set ``KERAS_BACKEND`` for this process from the step's setting and return it.

    Must run before Keras is imported; when Keras is already loaded on another backend the
    step cannot switch and this says so."""
    from gkeflow.components.train.tpu import find_tpu, tpu_device_files

    env = os.environ if env is None else env
    on_tpu = setting == "auto" and find_tpu(env, tpu_device_files()) is not None
    backend = resolve_backend(setting, on_tpu)
    loaded = sys.modules.get("keras")
    if loaded is not None:
        current = loaded.backend.backend()
        if current != backend:
            raise BackendError(
                f"Keras is already loaded on the {current} backend in this process; the "
                f"{backend} backend must be chosen before Keras is imported (run the step "
                f"in its own process, or set KERAS_BACKEND={backend})")
        return backend
    if backend == "jax":
        import importlib.util

        if importlib.util.find_spec("jax") is None:
            raise BackendError("the JAX backend needs jax, which is not installed here: "
                               "pip install 'gkeflow[jax]' (the TPU image has it), or set "
                               "backend: tensorflow")
    os.environ["KERAS_BACKEND"] = backend
    return backend


#: Modules whose calls tie a model to TensorFlow's runtime.
_TF_MODULES = ("tensorflow", "tf_keras")


def tensorflow_calls(source: str, filename: str = "<module>") -> list[str]:
    """``file:line name`` of every TensorFlow import or call in a model module's source.

    Keras APIs (``keras.*``, ``keras.ops``) run on every backend; ``tf.*`` and
    ``tensorflow.*`` only on TensorFlow."""
    tree = ast.parse(source, filename=filename)
    aliases: set[str] = set()
    found: set[tuple[int, str]] = set()  # (line, what)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _TF_MODULES:
                    aliases.add((alias.asname or alias.name).split(".")[0])
                    found.add((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module \
                and node.module.split(".")[0] in _TF_MODULES:
            found.add((node.lineno, f"from {node.module} import "
                                    f"{', '.join(a.name for a in node.names)}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases:
            found.add((node.lineno, f"{node.value.id}.{node.attr}"))
    return [f"{filename}:{line} {what}" for line, what in sorted(found)]


def check_user_module_for_jax(module: str) -> None:
    """Refuse a ``build_model`` module that calls TensorFlow when the step trains on JAX."""
    if not module:
        return
    if module.endswith(".py"):
        path = Path(module)
    else:
        import importlib.util

        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return  # not a Python source file: its calls are checked when it runs
        path = Path(spec.origin)
    if not path.is_file():
        return  # the module's own check says it is missing
    calls = tensorflow_calls(path.read_text(), str(path))
    if calls:
        raise BackendError(
            f"the model module {module} calls TensorFlow ({calls[0]}"
            f"{f' and {len(calls) - 1} more' if len(calls) > 1 else ''}), which the JAX "
            "backend cannot run; use keras.* / keras.ops instead, or set backend: tensorflow")
