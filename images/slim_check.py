"""Which of the suite's modules a step of the slim image (``gkeflow``) may load, and proof
that none of them reaches TensorFlow.

A step's code path is its component body's imports and, transitively, every import of the
suite's modules it reaches, at any depth and inside functions too (a lazy
``import tensorflow`` in a helper counts). :func:`tensorflow_paths` reads that path from
the source (no module is executed), :func:`import_blocking` imports it with TensorFlow
made unimportable. The slim image's build runs both (``python -m gkeflow.images.warm``), so
a step that would load TensorFlow fails the build, naming the module.

Needs nothing beyond the standard library and kfp.
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import importlib
import importlib.abc
import importlib.util
import inspect
import pkgutil
import sys
import textwrap

#: Packages a slim step must never import: TensorFlow and what only TensorFlow needs.
TENSORFLOW = ("tensorflow", "keras", "tensorboard", "tf_keras", "tensorflow_io_gcs_filesystem")
SUITE = "gkeflow"
#: Modules the slim image's build removes (images/prune.sh, ``GKEFLOW_IMAGE_KIND=slim``):
#: the Vertex AI API clients' asynchronous REST transports. The clients import them inside
#: ``try/except ImportError`` and keep grpc, grpc_asyncio and rest; no step selects them.
SLIM_PRUNED = ("google.cloud.aiplatform_v1*.services.*.transports.rest_asyncio",)


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def imported_names(tree: ast.AST, package: str = "") -> set[str]:
    """Absolute module names that ``tree`` imports anywhere (functions included); for
    ``from a import b``, ``a.b`` too where that is a module of the suite."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            if _top(base) == SUITE:
                names.update(f"{base}.{a.name}" for a in node.names
                             if _is_module(f"{base}.{a.name}"))
    return {n for n in names if n}


def _module_tree(name: str) -> tuple[ast.AST, str] | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), spec.origin)
    package = name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
    return tree, package


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _is_under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def code_path(roots: set[str], forbidden: tuple[str, ...] = TENSORFLOW
              ) -> tuple[list[str], list[list[str]]]:
    """The suite modules reachable from ``roots`` (module names) through imports, and the
    import chains from ``roots`` to a module under ``forbidden`` (package names; TensorFlow's
    by default), one per offending suite module."""
    chains: list[list[str]] = []
    parent: dict[str, str | None] = {}
    queue: list[str] = []
    for root in sorted(roots):
        for name in _with_parents(root):
            if name not in parent:
                parent[name] = None
                queue.append(name)
    seen: list[str] = []
    while queue:
        name = queue.pop(0)
        if _is_under(name, forbidden):
            chain = [name]
            while parent.get(chain[-1]):
                chain.append(parent[chain[-1]])
            chains.append(list(reversed(chain)))
            continue
        loaded = _module_tree(name) if _top(name) == SUITE else None
        if loaded is None:
            continue
        seen.append(name)
        for child in sorted(imported_names(*loaded)):
            for step in _with_parents(child):
                if step not in parent and (_is_under(step, forbidden) or _top(step) == SUITE):
                    parent[step] = name
                    queue.append(step)
    return sorted(seen), chains


def tensorflow_paths(roots: set[str]) -> list[list[str]]:
    """Import chains from ``roots`` through the suite's modules to a TensorFlow package;
    empty when the code path is clean."""
    return code_path(roots)[1]


def body_imports(func) -> set[str]:
    """The modules a component's Python function imports in its body."""
    return imported_names(ast.parse(textwrap.dedent(inspect.getsource(func))))


def components() -> list[tuple[str, object]]:
    """(``module:function``, component) for every Python component the suite defines."""
    from kfp.dsl.python_component import PythonComponent

    import gkeflow.components

    found = {}
    for info in pkgutil.walk_packages(gkeflow.components.__path__, "gkeflow.components."):
        if not info.name.endswith("component"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, PythonComponent) and value.python_func.__module__ == info.name:
                found[f"{info.name}:{value.python_func.__name__}"] = value
    return sorted(found.items())


def image_of(component) -> str:
    """The image a component declares (its ``base_image``)."""
    return component.component_spec.implementation.container.image


def slim_roots(slim_image: str) -> dict[str, set[str]]:
    """``module:function`` -> the suite modules its body imports, for each component that
    declares ``slim_image``."""
    return {name: {m for m in body_imports(c.python_func) if _top(m) == SUITE}
            for name, c in components() if image_of(c) == slim_image}


def is_pruned(name: str) -> bool:
    """Whether the slim image's build removes module ``name`` (:data:`SLIM_PRUNED`)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in SLIM_PRUNED)


class _Blocker(importlib.abc.MetaPathFinder):
    def __init__(self, packages: tuple[str, ...], image: str, pruned: bool = False) -> None:
        self.packages, self.image, self.pruned = packages, image, pruned
        self.asked: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if _is_under(name, self.packages) or (self.pruned and is_pruned(name)):
            self.asked.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (not in {self.image})",
                                      name=name)
        return None


@contextlib.contextmanager
def blocked(packages: tuple[str, ...], image: str = "the image"):
    """Within the block, importing a module under ``packages`` raises ModuleNotFoundError,
    as in an image that leaves them out; yields the list of the names asked for."""
    blocker = _Blocker(packages, image)
    sys.meta_path.insert(0, blocker)
    try:
        yield blocker.asked
    finally:
        sys.meta_path.remove(blocker)


def tensorflow_blocked():
    """Within the block, importing TensorFlow (or Keras, TensorBoard) raises
    ModuleNotFoundError, as in the slim image."""
    return blocked(TENSORFLOW, "the slim image")


@contextlib.contextmanager
def slim_blocked():
    """Within the block, what the slim image lacks (TensorFlow and :data:`SLIM_PRUNED`)
    raises ModuleNotFoundError; yields the list of the names asked for."""
    blocker = _Blocker(TENSORFLOW, "the slim image", pruned=True)
    sys.meta_path.insert(0, blocker)
    try:
        yield blocker.asked
    finally:
        sys.meta_path.remove(blocker)


def import_blocking(names: list[str]) -> str:
    """Import ``names`` with TensorFlow unimportable; the first failure as one line
    (``module: error``), "" when all import."""
    with tensorflow_blocked():
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - any failure is reported with its module
                return f"{name}: {type(exc).__name__}: {exc}"
    return ""


def needs_tensorflow(name: str) -> str:
    """The TensorFlow module that importing ``name`` (a user's module) asks for; "" when it
    imports without one (or fails for another reason, which importing it then reports)."""
    with tensorflow_blocked():
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and _top(exc.name) in TENSORFLOW:
                for loaded in [m for m in sys.modules if _top(m) == _top(name)]:
                    sys.modules.pop(loaded, None)
                return exc.name
        except Exception:  # noqa: BLE001 - reported by import_blocking
            return ""
    return ""


def problems(slim_image: str) -> list[str]:
    """One line per slim component whose code path reaches TensorFlow."""
    lines = []
    for name, roots in slim_roots(slim_image).items():
        for chain in tensorflow_paths(roots):
            lines.append(f"{name} runs in the slim image but imports TensorFlow: "
                         f"{' -> '.join(chain)}")
    return lines
