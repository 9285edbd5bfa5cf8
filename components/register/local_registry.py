"""The embedded model registry: one SQLite file holding models, versions and aliases.

Safe with concurrent writers (each write is one ``BEGIN IMMEDIATE`` transaction)
and idempotent per pipeline run and task: a retried registration returns the
version it made the first time instead of creating another.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS model_versions (
    name        TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    uri         TEXT    NOT NULL,
    metrics     TEXT    NOT NULL,
    labels      TEXT    NOT NULL,
    run_id      TEXT    NOT NULL,
    task_key    TEXT    NOT NULL,
    created_at  REAL    NOT NULL,
    PRIMARY KEY (name, version),
    UNIQUE (name, run_id, task_key)
);
CREATE TABLE IF NOT EXISTS model_aliases (
    name     TEXT    NOT NULL,
    alias    TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    PRIMARY KEY (name, alias),
    FOREIGN KEY (name, version) REFERENCES model_versions (name, version)
);
"""

MODEL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
ALIAS_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


class RegistryError(ValueError):
    """A registry request that cannot be carried out; the message says why."""


@dataclass(frozen=True)
class ModelVersion:
    name: str
    version: int
    uri: str
    metrics: dict[str, float]
    labels: dict[str, str]
    run_id: str
    created_at: float
    aliases: tuple[str, ...] = ()
    #: The backend's own name for this version; empty for the embedded registry.
    resource: str = ""
    #: Where the version came from: pipeline task, data URI, ...
    lineage: dict[str, str] = field(default_factory=dict)

    @property
    def resource_name(self) -> str:
        """The registry's name for this version (e.g. a Vertex AI model resource name)."""
        return self.resource or f"local://{self.name}/versions/{self.version}"


def validate_model_name(name: str) -> None:
    if not MODEL_NAME.match(name or ""):
        raise RegistryError(
            f"invalid model name {name!r}: use 1-63 lower-case letters, digits and '-', "
            "starting with a letter"
        )


def validate_alias(alias: str) -> None:
    if not ALIAS_NAME.match(alias or ""):
        raise RegistryError(
            f"invalid alias {alias!r}: use 1-63 lower-case letters, digits and '-', "
            "starting with a letter"
        )


def registry_path(uri: str) -> Path:
    """``sqlite:////abs/path.db``, ``sqlite:///relative.db`` or a plain path -> the file."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
    if "://" in uri:
        raise RegistryError(f"the local registry needs a sqlite:/// URI or a path; got {uri!r}")
    return Path(uri)


class LocalRegistry:
    """Models, versions and aliases in an SQLite database file."""

    def __init__(self, uri: str | Path):
        self.path = registry_path(str(uri))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_dir():
            raise RegistryError(f"the registry {self.path} is a directory; name a .db file "
                                "(sqlite:///path/registry.db)")
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            raise RegistryError(f"cannot open the registry {self.path}: {exc} (is it a "
                                "gkeflow registry, an SQLite file?)") from exc

    def _open(self) -> None:
        """Create the tables when missing, and add columns older files lack."""
        with self._connect() as conn:
            conn.executescript(_SCHEMA)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(model_versions)")}
            if "lineage" not in columns:  # databases written before lineage was recorded
                try:
                    conn.execute("ALTER TABLE model_versions "
                                 "ADD COLUMN lineage TEXT NOT NULL DEFAULT '{}'")
                except sqlite3.OperationalError as exc:  # added by a concurrent opener
                    if "duplicate column" not in str(exc):
                        raise

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def register(
        self,
        name: str,
        uri: str,
        metrics: dict[str, float],
        run_id: str,
        task_key: str = "register-model",
        labels: dict[str, str] | None = None,
        aliases: tuple[str, ...] = (),
        lineage: dict[str, str] | None = None,
    ) -> tuple[ModelVersion, bool]:
        """Add a version, or return the one this run and task already added.

        Returns the version and whether it was created now.
        """
        validate_model_name(name)
        for alias in aliases:
            validate_alias(alias)
        if not uri:
            raise RegistryError("model URI is empty")
        if not run_id:
            raise RegistryError("pipeline run id is empty")
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "SELECT version FROM model_versions WHERE name=? AND run_id=? AND task_key=?",
                (name, run_id, task_key),
            ).fetchone()
            created = row is None
            if created:
                version = conn.execute(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM model_versions WHERE name=?",
                    (name,),
                ).fetchone()[0]
                conn.execute(
                    "INSERT INTO model_versions (name, version, uri, metrics, labels, run_id, "
                    "task_key, created_at, lineage) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (name, version, uri, json.dumps(metrics, sort_keys=True),
                     json.dumps(labels or {}, sort_keys=True), run_id, task_key, time.time(),
                     json.dumps({"pipeline_task": task_key, **(lineage or {})},
                                sort_keys=True)),
                )
                for alias in aliases:
                    self._set_alias(conn, name, alias, version)
            else:
                version = row[0]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
        return self.get(name, version), created

    @staticmethod
    def _set_alias(conn: sqlite3.Connection, name: str, alias: str, version: int) -> None:
        conn.execute(
            "INSERT INTO model_aliases (name, alias, version) VALUES (?, ?, ?) "
            "ON CONFLICT (name, alias) DO UPDATE SET version=excluded.version",
            (name, alias, version),
        )

    def set_alias(self, name: str, version: int, alias: str) -> ModelVersion:
        """Point ``alias`` at ``version`` (moving it from any other version), atomically."""
        validate_alias(alias)
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            exists = conn.execute(
                "SELECT 1 FROM model_versions WHERE name=? AND version=?", (name, version)
            ).fetchone()
            if not exists:
                raise RegistryError(f"model {name!r} has no version {version}")
            self._set_alias(conn, name, alias, version)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()
        return self.get(name, version)

    def get(self, name: str, version: int) -> ModelVersion:
        versions = self.list(name=name, version=version)
        if not versions:
            known = sorted({v.version for v in self.list(name=name)})
            if not known:
                raise RegistryError(f"no model named {name!r} in the registry {self.path}")
            raise RegistryError(f"model {name!r} has no version {version} (versions: "
                                f"{', '.join(map(str, known))})")
        return versions[0]

    def get_by_alias(self, name: str, alias: str) -> ModelVersion | None:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT version FROM model_aliases WHERE name=? AND alias=?", (name, alias)
            ).fetchone()
        return self.get(name, row[0]) if row else None

    def list(self, name: str | None = None, version: int | None = None,
             run_id: str | None = None) -> list[ModelVersion]:
        query = ("SELECT name, version, uri, metrics, labels, run_id, created_at, lineage "
                 "FROM model_versions")
        clauses, args = [], []
        for column, value in (("name", name), ("version", version), ("run_id", run_id)):
            if value is not None:
                clauses.append(f"{column}=?")
                args.append(value)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY name, version"
        with self._connect() as conn:
            rows = conn.execute(query, args).fetchall()
            alias_rows = conn.execute("SELECT name, version, alias FROM model_aliases").fetchall()
        aliases: dict[tuple[str, int], list[str]] = {}
        for n, v, a in alias_rows:
            aliases.setdefault((n, v), []).append(a)
        return [
            ModelVersion(
                name=n, version=v, uri=u, metrics=json.loads(m), labels=json.loads(lab),
                run_id=r, created_at=c, aliases=tuple(sorted(aliases.get((n, v), []))),
                lineage=json.loads(lin),
            )
            for n, v, u, m, lab, r, c, lin in rows
        ]
