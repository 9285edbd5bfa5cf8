"""Vertex ML Metadata (v1 REST) for the fake Vertex AI server: metadata stores, contexts
and ``addContextChildren``, what Vertex AI Experiments is built on.

Bodies are parsed strictly with ``aiplatform_v1`` types; answers follow the service: 404
NOT_FOUND for a missing store or context, 409 ALREADY_EXISTS for a second create under one
id, 400 for a context without a schema title or a child that would make a cycle, and a
child the parent has already is skipped. ``PATCH`` of a context (``UpdateContext``, what
aiplatform's ``ExperimentRun`` logs parameters, metrics and its state with) takes a
``Context`` body whose name, if given, is the URL's; display name, description, labels and
schema stay as they are unless set, metadata keys are merged at the top level, and a stale
``etag`` is refused (409). Artifacts are created (an id once, with a schema title) and
read back, and ``addContextArtifactsAndExecutions`` attributes existing ones to a context
(``context_artifacts``): how an experiment run is linked to its TensorBoard run; reading one
that was never made answers 404, as for the TensorBoard run an experiment run without
TensorBoard looks up. A pipeline job gets its
``system.PipelineRun`` context when it starts running, as on Vertex AI (``run_context``).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from google.cloud import aiplatform_v1 as v1

LOCATION = r"projects/[^/]+/locations/[^/]+"
CONTEXT_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
MAX_PARENTS = 10


class FakeMetadata:
    """Stores and contexts of one fake Vertex AI server (its lock held by the caller)."""

    def __init__(self, server):
        self.server = server
        self.stores: dict[str, v1.MetadataStore] = {}
        self.contexts: dict[str, v1.Context] = {}
        self.artifacts: dict[str, v1.Artifact] = {}
        self.context_artifacts: dict[str, list[str]] = {}  # context -> artifact names

    def handles(self, path: str) -> bool:
        return "/metadataStores" in path

    def route(self, record) -> tuple[int, Any]:
        from tests.integration.fakes import Conflict, Invalid

        path, method, server = record.path, record.method, self.server
        match = re.fullmatch(rf"/v1/({LOCATION})/metadataStores", path)
        if match and method == "POST":
            self._only_query(record, {"metadataStoreId"})
            store = server._parse(v1.MetadataStore, record.body, "MetadataStore body")
            store_id = record.query.get("metadataStoreId", [""])[0]
            if not CONTEXT_ID.match(store_id):
                raise Invalid(f"metadataStoreId {store_id!r} is not a resource id")
            store.name = f"{match[1]}/metadataStores/{store_id}"
            if store.name in self.stores:
                raise Conflict(f"MetadataStore {store.name} already exists")
            store.create_time = dt.datetime.now(dt.UTC)
            self.stores[store.name] = store
            return 200, {"name": f"{store.name}/operations/{server.new_id()}", "done": True,
                         "response": {"@type": "type.googleapis.com/google.cloud.aiplatform."
                                               "v1.MetadataStore", **server._json(store)}}
        match = re.fullmatch(rf"/v1/({LOCATION}/metadataStores/[^/:]+)", path)
        if match and method == "GET":
            self._only_query(record, set())
            return 200, server._json(self._store(match[1]))
        match = re.fullmatch(rf"/v1/({LOCATION}/metadataStores/[^/:]+)/contexts", path)
        if match and method == "POST":
            self._only_query(record, {"contextId"})
            return 200, server._json(self._create_context(match[1], record))
        match = re.fullmatch(rf"/v1/({LOCATION}/metadataStores/[^/:]+/contexts/[^/:]+)", path)
        if match and method == "GET":
            self._only_query(record, set())
            return 200, server._json(self._context(match[1]))
        if match and method == "PATCH":
            self._only_query(record, {"updateMask", "allowMissing"})
            return 200, server._json(self._update_context(match[1], record))
        match = re.fullmatch(rf"/v1/({LOCATION}/metadataStores/[^/:]+/artifacts/[^/:]+)", path)
        if match and method == "GET":
            self._only_query(record, set())
            self._store(match[1].split("/artifacts/")[0])
            if match[1] not in self.artifacts:
                raise LookupError(f"Artifact {match[1]} not found")
            return 200, server._json(self.artifacts[match[1]])
        match = re.fullmatch(rf"/v1/({LOCATION}/metadataStores/[^/:]+)/artifacts", path)
        if match and method == "POST":
            self._only_query(record, {"artifactId"})
            return 200, server._json(self._create_artifact(match[1], record))
        match = re.fullmatch(rf"/v1/({LOCATION}/metadataStores/[^/:]+/contexts/[^/:]+)"
                             r":addContextArtifactsAndExecutions", path)
        if match and method == "POST":
            self._only_query(record, set())
            request = server._parse(v1.AddContextArtifactsAndExecutionsRequest, record.body,
                                    "AddContextArtifactsAndExecutionsRequest body")
            if request.context:
                raise Invalid("the context belongs in the URL, not the body")
            self._context(match[1])
            for name in request.artifacts:
                if name not in self.artifacts:
                    raise LookupError(f"Artifact {name} not found")
                kept = self.context_artifacts.setdefault(match[1], [])
                if name not in kept:
                    kept.append(name)
            return 200, {}
        match = re.fullmatch(
            rf"/v1/({LOCATION}/metadataStores/[^/:]+/contexts/[^/:]+):addContextChildren", path)
        if match and method == "POST":
            self._only_query(record, set())
            request = server._parse(v1.AddContextChildrenRequest, record.body,
                                    "AddContextChildrenRequest body")
            if request.context:
                raise Invalid("the parent context belongs in the URL, not the body")
            self._add_children(match[1], list(request.child_contexts))
            return 200, {}
        raise Invalid(f"the fake does not implement {method} {path}")

    @staticmethod
    def _only_query(record, allowed: set[str]) -> None:
        from tests.integration.fakes import Invalid

        unknown = set(record.query) - allowed - {"$alt"}
        if unknown:
            raise Invalid(f"unknown query parameters {sorted(unknown)}")

    def _store(self, name: str) -> v1.MetadataStore:
        if name not in self.stores:
            raise LookupError(f"MetadataStore {name} not found")
        return self.stores[name]

    def _context(self, name: str) -> v1.Context:
        if name not in self.contexts:
            raise LookupError(f"Context {name} not found")
        return self.contexts[name]

    def _create_context(self, store: str, record) -> v1.Context:
        from tests.integration.fakes import Conflict, Invalid

        self._store(store)
        context = self.server._parse(v1.Context, record.body, "Context body")
        context_id = record.query.get("contextId", [""])[0]
        if not CONTEXT_ID.match(context_id):
            raise Invalid(f"contextId {context_id!r} is not a resource id")
        if not context.schema_title:
            raise Invalid("Context.schemaTitle is required")
        if context.name or context.parent_contexts:
            raise Invalid("Context.name and Context.parentContexts are output only")
        context.name = f"{store}/contexts/{context_id}"
        if context.name in self.contexts:
            raise Conflict(f"Context {context.name} already exists")
        context.create_time = context.update_time = dt.datetime.now(dt.UTC)
        context.etag = self.server.new_id()
        self.contexts[context.name] = context
        return context

    def _create_artifact(self, store: str, record) -> v1.Artifact:
        from tests.integration.fakes import Conflict, Invalid

        self._store(store)
        artifact = self.server._parse(v1.Artifact, record.body, "Artifact body")
        artifact_id = record.query.get("artifactId", [""])[0]
        if not CONTEXT_ID.match(artifact_id):
            raise Invalid(f"artifactId {artifact_id!r} is not a resource id")
        if not artifact.schema_title or artifact.name:
            raise Invalid("Artifact.schemaTitle is required and name is output only")
        artifact.name = f"{store}/artifacts/{artifact_id}"
        if artifact.name in self.artifacts:
            raise Conflict(f"Artifact {artifact.name} already exists")
        artifact.create_time = artifact.update_time = dt.datetime.now(dt.UTC)
        artifact.etag = self.server.new_id()
        self.artifacts[artifact.name] = artifact
        return artifact

    def _update_context(self, name: str, record) -> v1.Context:
        from tests.integration.fakes import Conflict, Invalid

        context = self._context(name)
        change = self.server._parse(v1.Context, record.body, "Context body")
        if change.name and change.name != name:
            raise Invalid(f"Context.name {change.name!r} differs from the URL's {name!r}")
        if change.etag and change.etag != context.etag:
            raise Conflict(f"Context {name} changed since it was read (etag)")
        if record.query.get("updateMask"):
            raise Invalid("the fake does not implement updateMask")
        for field in ("display_name", "description", "schema_title", "schema_version"):
            if getattr(change, field):
                setattr(context, field, getattr(change, field))
        if change.labels:
            context.labels = dict(change.labels)
        if change.metadata:
            context.metadata = {**dict(context.metadata), **dict(change.metadata)}
        context.update_time = dt.datetime.now(dt.UTC)
        context.etag = self.server.new_id()
        return context

    def _add_children(self, parent: str, children: list[str]) -> None:
        from tests.integration.fakes import Invalid

        self._context(parent)
        for child in children:
            context = self._context(child)
            if child == parent or child in self._ancestors(parent):
                raise Invalid(f"adding {child} under {parent} would make a cycle")
            if parent in context.parent_contexts:
                continue  # already a child: skipped, as the service does
            if len(context.parent_contexts) >= MAX_PARENTS:
                raise Invalid(f"{child} would have more than {MAX_PARENTS} parents")
            context.parent_contexts.append(parent)

    def _ancestors(self, name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            for parent in self.contexts[todo.pop()].parent_contexts:
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return seen

    # -- what the pipeline service does ------------------------------------------------------

    def run_context(self, job) -> v1.Context:
        """The job's ``system.PipelineRun`` context (in the ``default`` store, made with it
        if missing), created once, as Vertex AI does when the run starts."""
        match = re.fullmatch(rf"({LOCATION})/pipelineJobs/([^/]+)", job.name)
        store = f"{match[1]}/metadataStores/default"
        if store not in self.stores:
            self.stores[store] = v1.MetadataStore(name=store)
        name = f"{store}/contexts/{match[2]}"
        if name not in self.contexts:
            self.contexts[name] = v1.Context(
                name=name, display_name=match[2], schema_title="system.PipelineRun",
                schema_version="0.0.1", etag=self.server.new_id())
        return self.contexts[name]

    def experiment_runs(self, experiment_context: str) -> list[str]:
        """Names of the contexts whose parents include ``experiment_context``."""
        return sorted(name for name, context in self.contexts.items()
                      if experiment_context in context.parent_contexts)
