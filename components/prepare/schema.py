"""The dataset schema every stage reads: each column's type, role, vocabulary and nullability.

Written by data preparation as ``schema.json``; read by training, evaluation and
prediction. A YAML file with the same fields can be given as the expected schema.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gkeflow.components.prepare.sources import DataError

SCHEMA_FILE = "schema.json"

@dataclass
class ColumnSchema:
    name: str
    type: str  # "numeric" | "categorical"
    role: str  # "feature" | "label" | "key" | "ignored"
    nullable: bool
    vocabulary: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Schema:
    label: str
    label_vocabulary: list[str]  # the classes; empty for regression
    columns: list[ColumnSchema]
    task: str = "classification"  # or "regression": the label is a number to predict
    task_reason: str = ""  # why, as the data report and the run's first lines say it

    @property
    def regression(self) -> bool:
        return self.task == "regression"

    @property
    def features(self) -> list[ColumnSchema]:
        return [c for c in self.columns if c.role == "feature"]

    def column(self, name: str) -> ColumnSchema:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Schema:
        raw = json.loads(text)
        return cls(
            label=raw["label"],
            label_vocabulary=list(raw["label_vocabulary"]),
            columns=[ColumnSchema(**c) for c in raw["columns"]],
            task=raw.get("task", "classification"),
            task_reason=raw.get("task_reason", ""),
        )

    @classmethod
    def from_yaml(cls, text: str) -> Schema:
        """The same fields as schema.json, written as YAML."""
        import yaml

        raw = yaml.safe_load(text)
        if not isinstance(raw, dict) or "columns" not in raw or "label" not in raw:
            raise DataError("an expected schema needs 'label' and 'columns'")
        columns = []
        for c in raw["columns"]:
            c = dict(c)
            c.setdefault("role", "label" if c["name"] == raw["label"] else "feature")
            c.setdefault("nullable", True)
            c["vocabulary"] = [str(v) for v in c.get("vocabulary") or []]
            columns.append(ColumnSchema(**c))
        return cls(label=raw["label"],
                   label_vocabulary=[str(v) for v in raw.get("label_vocabulary") or []],
                   columns=columns, task=str(raw.get("task", "classification")))

    @classmethod
    def load(cls, path: Path) -> Schema:
        """schema.json, a directory holding one, or a YAML file (.yaml/.yml)."""
        path = Path(path)
        if path.is_dir():
            path = path / SCHEMA_FILE
        if not path.exists():
            raise DataError(f"schema file not found: {path}")
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix in (".yaml", ".yml"):
                return cls.from_yaml(text)
            return cls.from_json(text)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, DataError):
                raise
            raise DataError(f"invalid schema file {path}: {exc}") from exc
