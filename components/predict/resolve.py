"""Which model to score with, and everything scoring needs from its training run.

- :func:`parse_model_ref`: ``NAME``, ``NAME@3`` (a version) or ``NAME@champion`` (an alias);
- :func:`resolve_version`: the registry version (any of the three registry backends,
  through :func:`gkeflow.components.register.backends.open_registry`);
- :func:`fetch_model`: the SavedModel on local disk (copied from ``gs://`` when needed);
- :func:`training_profile`: the training run's ``schema.json`` (column types, roles and
  vocabularies) and numeric ranges from its ``stats.json``, found through the model's
  ``gkeflow_model.json`` (``training_data_uri``: the prepared dataset).
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from gkeflow.components.prepare.logic import ColumnSchema, Schema
from gkeflow.components.register.backends import champion_or_latest, open_registry
from gkeflow.components.register.local_registry import ModelVersion, RegistryError

MODEL_METADATA_FILE = "gkeflow_model.json"
SCHEMA_FILE = "schema.json"
STATS_FILE = "stats.json"
DEFAULT_ALIAS = "champion"
_REF = re.compile(r"^(?P<name>[a-z][a-z0-9-]{0,62})(?:@(?P<at>[A-Za-z0-9-]+))?$")


class PredictError(ValueError):
    """Scoring cannot go ahead; the message names the problem and the fix."""


@dataclass(frozen=True)
class ModelRef:
    """A model name with a version number (> 0) or an alias."""

    name: str
    version: int = 0
    alias: str = DEFAULT_ALIAS

    def __str__(self) -> str:
        return f"{self.name}@{self.version or self.alias}"


def parse_model_ref(text: str, version: int = 0, alias: str = "") -> ModelRef:
    """``NAME[@VERSION|@alias]``; ``version``/``alias`` apply when the text names neither.

    Raises:
        PredictError: a malformed reference, or a version and an alias together.
    """
    match = _REF.match(text.strip())
    if not match:
        raise PredictError(
            f"malformed model reference {text!r}: expected NAME, NAME@VERSION or NAME@ALIAS "
            "(lower-case letters, digits and '-', e.g. penguins-classifier@champion)")
    at = match["at"] or ""
    if at and (version or alias):
        raise PredictError(f"{text!r} already names a version or alias; drop the "
                           "separate model_version/model_alias")
    if version < 0:
        raise PredictError(f"model_version must be >= 1 (0 = use the alias); got {version}")
    if at.isdigit():
        if int(at) < 1:
            raise PredictError(f"model version must be >= 1 in {text!r}")
        return ModelRef(match["name"], version=int(at), alias="")
    if version and alias:
        raise PredictError("give model_version or model_alias, not both")
    if version:
        return ModelRef(match["name"], version=version, alias="")
    return ModelRef(match["name"], alias=at or alias or DEFAULT_ALIAS)


def resolve_version(registry_uri: str, ref: ModelRef, registry=None) -> tuple[ModelVersion, str]:
    """The registry version ``ref`` names, and a note on how it was chosen.

    An explicit version must exist. An alias must exist, except ``champion``: a model
    that was registered but never promoted is scored with its newest version (as the
    evaluation step compares against it), and the note says so.
    """
    registry = registry or open_registry(registry_uri)
    if ref.version:
        try:
            return registry.get(ref.name, ref.version), f"version {ref.version} as requested"
        except (RegistryError, KeyError, LookupError) as exc:
            raise PredictError(missing_model(registry, registry_uri, ref.name, ref.version)
                               or f"model {ref.name} version {ref.version} is not in the "
                               f"registry {registry_uri}: {exc}") from exc
    found = registry.get_by_alias(ref.name, ref.alias)
    if found is not None:
        return found, f"alias {ref.alias!r} -> version {found.version}"
    if ref.alias == DEFAULT_ALIAS:
        latest = champion_or_latest(registry, ref.name, ref.alias)
        if latest is not None:
            return latest, (f"no {DEFAULT_ALIAS!r} alias yet; newest version {latest.version} "
                            "used (promote one with `gkeflow models promote`)")
    known = sorted({v.version for v in registry.list(name=ref.name)})
    if not known:
        raise PredictError(missing_model(registry, registry_uri, ref.name) or
                           f"no model named {ref.name!r} in the registry {registry_uri}; "
                           "train and register one first (gkeflow run), or check --model")
    raise PredictError(f"model {ref.name!r} has no alias {ref.alias!r} in {registry_uri} "
                       f"(versions: {', '.join(map(str, known))}); name a version "
                       f"({ref.name}@{known[-1]}) or promote one")


def missing_model(registry, registry_uri: str, name: str, version: int = 0) -> str:
    """Why ``name`` (version ``version``) is not in the registry: the versions the model
    has, or, when there is no such model, the models there are (the closest named first);
    empty when the registry cannot be listed either."""
    try:
        known = sorted({v.version for v in registry.list(name=name)})
        names = [] if known else sorted({v.name for v in registry.list()})
    except (RegistryError, KeyError, LookupError):
        return ""
    if known:
        return (f"model {name!r} has no version {version} in the registry {registry_uri} "
                f"(versions: {', '.join(map(str, known))}); name one ({name}@{known[-1]})")
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    listed = (f"its models: {', '.join(names[:10])}{', ...' if len(names) > 10 else ''}"
              if names else "it holds no models yet")
    hint = f"did you mean {close[0]!r}? Otherwise t" if close else "t"
    return (f"no model named {name!r} in the registry {registry_uri} ({listed}); "
            f"{hint}rain and register it first (gkeflow run), or check the name")


def _gcs_copy_dir(uri: str, target: Path) -> None:
    from gkeflow.components.prepare.sources import gcs_client

    bucket_name, _, prefix = uri[len("gs://"):].partition("/")
    prefix = prefix.rstrip("/") + "/"
    client = gcs_client()
    blobs = [b for b in client.list_blobs(bucket_name, prefix=prefix) if not b.name.endswith("/")]
    if not blobs:
        raise PredictError(f"no model files under {uri}")
    for blob in blobs:
        path = target / blob.name[len(prefix):]
        path.parent.mkdir(parents=True, exist_ok=True)
        blob.download_to_filename(str(path))


def fetch_model(uri: str, workdir: Path) -> Path:
    """The SavedModel directory on local disk: a local path as it is, ``gs://`` copied into
    ``workdir`` (TensorFlow reads local paths; Cloud Storage goes through its client)."""
    if uri.startswith("gs://"):
        target = Path(workdir) / "model"
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        _gcs_copy_dir(uri, target)
        path = target
    elif "://" in uri and not uri.startswith("file://"):
        raise PredictError(
            f"cannot read the model at {uri!r}: scoring reads local paths and gs:// URIs; "
            "use a Cloud Storage pipeline root so models are registered at gs:// URIs")
    else:
        path = Path(uri.removeprefix("file://"))
    if not (path / "saved_model.pb").exists():
        raise PredictError(f"no SavedModel (saved_model.pb) at {uri}; the registry points at "
                           "a model that is gone or was not exported by train_model")
    return path


@dataclass
class TrainingProfile:
    """What the training run knew about its data: the schema and numeric ranges."""

    schema: Schema
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    missing_rates: dict[str, float] = field(default_factory=dict)
    source: str = ""  # where the schema was read from
    notes: list[str] = field(default_factory=list)


def read_text(uri: str) -> str | None:
    """The text of a local path, ``file://`` or ``gs://`` object; None when it is absent
    or of a scheme it does not read."""
    if uri.startswith("gs://"):
        from gkeflow.components.prepare.sources import gcs_client

        bucket_name, _, name = uri[len("gs://"):].partition("/")
        blob = gcs_client().bucket(bucket_name).get_blob(name)
        return blob.download_as_text() if blob is not None else None
    if "://" in uri and not uri.startswith("file://"):
        return None
    path = Path(uri.removeprefix("file://"))
    return path.read_text(encoding="utf-8") if path.is_file() else None


def model_metadata(model_uri: str) -> dict | None:
    """The ``gkeflow_model.json`` of the model at ``model_uri``; None when absent or
    unreadable (a model gkeflow's train step did not export)."""
    try:
        text = read_text(f"{model_uri.rstrip('/')}/{MODEL_METADATA_FILE}")
        return json.loads(text) if text is not None else None
    except Exception:  # noqa: BLE001 - unreachable or unreadable: the step says why
        return None


def missing_inputs(metadata: dict, header: list[str]) -> list[str]:
    """The model's raw input columns (``features[].name``) that ``header`` lacks."""
    present = set(header)
    return [f["name"] for f in metadata.get("features", []) if f["name"] not in present]


def _schema_from_metadata(metadata: dict) -> Schema:
    columns = [ColumnSchema(f["name"], f["type"], "feature", True) for f in metadata["features"]]
    label = metadata.get("label", "label")
    columns.append(ColumnSchema(label, "categorical", "label", True,
                                vocabulary=list(metadata["label_vocabulary"])))
    return Schema(label=label, label_vocabulary=list(metadata["label_vocabulary"]),
                  columns=columns)


def training_profile(model_dir: Path) -> TrainingProfile:
    """The training schema and statistics for the model in ``model_dir``.

    Looks for ``schema.json``/``stats.json`` in the model directory, then in the prepared
    dataset named by ``training_data_uri``; without them the schema is rebuilt from the
    model's own metadata (types only: new categories and ranges cannot be checked).
    """
    metadata_file = Path(model_dir) / MODEL_METADATA_FILE
    if not metadata_file.is_file():
        raise PredictError(f"the model at {model_dir} has no {MODEL_METADATA_FILE}: score "
                           "models that gkeflow's train step exported")
    metadata = json.loads(metadata_file.read_text())
    places = [str(model_dir)]
    if metadata.get("training_data_uri"):
        places.append(metadata["training_data_uri"].rstrip("/"))
    profile = None
    for place in places:
        try:
            text = read_text(f"{place}/{SCHEMA_FILE}")
        except Exception as exc:  # noqa: BLE001 - an unreachable place is only noted
            text = None
            note = f"could not read {place}/{SCHEMA_FILE}: {exc}"
        else:
            note = ""
        if text is None:
            if note:
                metadata.setdefault("_notes", []).append(note)
            continue
        try:
            schema = Schema.from_json(text)
        except (KeyError, TypeError, ValueError) as exc:
            raise PredictError(f"invalid training schema {place}/{SCHEMA_FILE}: {exc}") from exc
        profile = TrainingProfile(schema=schema, source=f"{place}/{SCHEMA_FILE}")
        stats_text = read_text(f"{place}/{STATS_FILE}")
        if stats_text:
            _add_ranges(profile, json.loads(stats_text))
        else:
            profile.notes.append("no training statistics: numeric ranges not checked")
        break
    if profile is None:
        profile = TrainingProfile(
            schema=_schema_from_metadata(metadata), source=f"{model_dir}/{MODEL_METADATA_FILE}",
            notes=["the training schema was not found (looked in: " + ", ".join(places)
                   + "); new categories and numeric ranges are not checked"])
    profile.notes.extend(metadata.get("_notes", []))
    _check_against_model(profile.schema, metadata)
    return profile


def _add_ranges(profile: TrainingProfile, stats: dict) -> None:
    splits = stats.get("splits", {})
    for column in profile.schema.features:
        lows, highs, count, missing = [], [], 0, 0
        for split in splits.values():
            entry = split.get("columns", {}).get(column.name)
            if not entry:
                continue
            count += entry.get("count", 0)
            missing += entry.get("missing", 0)
            if entry.get("min") is not None:
                lows.append(entry["min"])
                highs.append(entry["max"])
        if lows and column.type == "numeric":
            profile.ranges[column.name] = (min(lows), max(highs))
        if count:
            profile.missing_rates[column.name] = missing / count


def _check_against_model(schema: Schema, metadata: dict) -> None:
    """The schema must describe the model's inputs: same features, same types."""
    model = {f["name"]: f["type"] for f in metadata["features"]}
    mine = {c.name: c.type for c in schema.features}
    if model != mine:
        raise PredictError(
            "the training schema does not match the model's inputs (model: "
            f"{sorted(model.items())}; schema: {sorted(mine.items())}); the model directory "
            "and its training data are out of step")
