"""Kubeflow Pipelines pipelines and their versions, uploaded once: the part of
:class:`~gkeflow.pipelines.targets.kfp.KfpBackend` that finds or creates them, and the
look-ups that make its creates idempotent (:func:`name_filter`, :class:`Found`)."""

from __future__ import annotations

import json

from gkeflow.pipelines.targets.backends import PreparedPipeline


def name_filter(key: str, value: str) -> str:
    """A v2beta1 list filter: ``key`` EQUALS ``value``."""
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": key,
                                       "stringValue": value}]})


class Found:
    """What a look-up found, shaped like a create's answer; falsy-free: ``None`` when not
    found is handled by :meth:`__new__`."""

    def __new__(cls, found_id: str | None, attribute: str = "pipeline_id"):
        if not found_id:
            return None
        instance = super().__new__(cls)
        setattr(instance, attribute, found_id)
        return instance


class KfpPipelineVersions:
    """Pipelines and versions; mixed into KfpBackend, whose ``client``, ``call``, ``once``
    and ``_plan`` it uses."""

    def find_pipeline_version(self, prepared: PreparedPipeline) -> tuple[str | None, str | None]:
        pipeline_id = self.call(f"look up pipeline {prepared.display_name!r}",
                                 lambda: self._pipeline_id(prepared))
        if not pipeline_id:
            return None, None
        return pipeline_id, self.call(f"look up version {prepared.version_name!r}",
                                       lambda: self._version_id(pipeline_id, prepared))

    def _pipeline_id(self, prepared: PreparedPipeline) -> str | None:
        return self.client.get_pipeline_id(prepared.display_name)

    def _version_id(self, pipeline_id: str, prepared: PreparedPipeline) -> str | None:
        response = self.client.list_pipeline_versions(
            pipeline_id, page_size=10, filter=name_filter("name", prepared.version_name))
        for version in response.pipeline_versions or []:
            if prepared.version_name in (version.name, version.display_name):
                return version.pipeline_version_id
        return None

    def ensure_pipeline_version(self, prepared: PreparedPipeline) -> tuple[str, str, list[str]]:
        """Create the pipeline (once, with no version of its own) and upload this version
        (once); returns ids and what was done.

        The pipeline is created empty (``POST /pipelines``) rather than uploaded, since an
        upload also makes a default version: the first submit would then leave two versions
        of the same spec in the Kubeflow UI.
        """
        if self.dry_run:
            return self._plan_pipeline_version(prepared)
        done: list[str] = []
        pipeline_id, version_id = self.find_pipeline_version(prepared)
        if version_id:
            note = f"pipeline version {prepared.version_name} already uploaded"
            return pipeline_id, version_id, [note]
        if not pipeline_id:
            from kfp_server_api import V2beta1Pipeline

            body = V2beta1Pipeline(display_name=prepared.display_name, name=prepared.display_name,
                                   description=f"gkeflow pipeline {prepared.name}")
            pipeline = self.call(
                f"create pipeline {prepared.display_name!r}",
                lambda: self.client._pipelines_api.pipeline_service_create_pipeline(body),
                idempotent=False,
                recover=lambda: Found(self.once(
                    f"look up pipeline {prepared.display_name!r}",
                    lambda: self._pipeline_id(prepared))))
            pipeline_id = pipeline.pipeline_id
            done.append(f"created pipeline {prepared.display_name}")
        version = self.call(
            f"upload pipeline version {prepared.version_name!r}",
            lambda: self.client.upload_pipeline_version(
                prepared.path, prepared.version_name, pipeline_id=pipeline_id,
                description=f"{prepared.name} for {prepared.target}, spec sha256 "
                            f"{prepared.spec_sha256[:12]}"),
            idempotent=False,
            recover=lambda: Found(self.once(
                f"look up version {prepared.version_name!r}",
                lambda: self._version_id(pipeline_id, prepared)), "pipeline_version_id"))
        done.append(f"uploaded pipeline version {prepared.version_name}")
        return pipeline_id, version.pipeline_version_id, done

    def _plan_pipeline_version(self, prepared: PreparedPipeline):
        self._plan("GET", "/apis/v2beta1/pipelines?filter="
                   + name_filter("name", prepared.display_name), note="look up the pipeline")
        self._plan("POST", "/apis/v2beta1/pipelines",
                   {"display_name": prepared.display_name, "name": prepared.display_name,
                    "description": f"gkeflow pipeline {prepared.name}"},
                   note="only if the pipeline does not exist")
        self._plan("GET", "/apis/v2beta1/pipelines/<pipeline_id>/versions?filter="
                   + name_filter("name", prepared.version_name), note="look up the version")
        self._plan("POST", f"/apis/v2beta1/pipelines/upload_version?name="
                   f"{prepared.version_name}&pipelineid=<pipeline_id>",
                   f"<multipart uploadfile: {prepared.display_name}, {prepared.task_count} "
                   f"steps, sha256 {prepared.spec_sha256[:12]}>",
                   note="only if the version does not exist")
        return "<pipeline_id>", "<pipeline_version_id>", [
            f"would upload pipeline version {prepared.version_name} unless it exists"]
