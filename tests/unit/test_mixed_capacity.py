"""Mixed capacity on GKE: an on-demand chief and Spot workers in one JobSet (the chief's
replicated job first), refused on Vertex AI, priced per replicated job."""

from __future__ import annotations

import json
from datetime import date

import pytest

from gkeflow.components.scaleout import cluster
from gkeflow.components.scaleout import jobset as js
from gkeflow.components.scaleout.task_config import merge_task_config
from gkeflow.components.train.devices import is_chief
from gkeflow.pipelines.compute.capacity import GKE_SPOT_LABEL
from gkeflow.pipelines.compute.costing import machine_type, step_cost
from gkeflow.pipelines.compute.engines import gke
from gkeflow.pipelines.compute.prices import Price
from gkeflow.pipelines.compute.profiles import ComputeError, ComputeProfile, profile_problems
from gkeflow.pipelines.settings.monitoring_config import GKE_POD_LABELS
from tests.integration.fake_kube import validate_jobset

MIXED = ComputeProfile(cpu="8", memory="30G", accelerator="nvidia-l4", accelerator_count=1,
                       replicas=4, scheduling="spot", chief_scheduling="standard",
                       timeout_s=7200)


def _pods(manifest):
    return {job["name"]: job["template"]["spec"] for job in manifest["spec"]["replicatedJobs"]}


def test_the_chief_runs_on_demand_and_the_workers_on_spot_in_a_valid_jobset():
    manifest = js.finish(gke.jobset_template(MIXED, "img:1"), "gkeflow-train-x", "ns", "",
                         ["--a"])
    validate_jobset(manifest)  # the vendored JobSet CRD schema
    jobs = _pods(manifest)
    assert list(jobs) == ["chief", "worker"]  # the launcher reads the first one's log
    assert (jobs["chief"]["parallelism"], jobs["worker"]["parallelism"]) == (1, 3)
    assert js.replicas_of(manifest) == MIXED.replicas
    chief, worker = (jobs[name]["template"]["spec"] for name in ("chief", "worker"))
    assert GKE_SPOT_LABEL not in chief["nodeSelector"]
    assert all(t.get("key") != GKE_SPOT_LABEL for t in chief["tolerations"])
    assert worker["nodeSelector"][GKE_SPOT_LABEL] == "true"
    assert any(t.get("key") == GKE_SPOT_LABEL for t in worker["tolerations"])
    for pod in (chief, worker):  # both GPU pods on the same accelerator
        assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == MIXED.accelerator
    for job in manifest["spec"]["replicatedJobs"]:
        labels = job["template"]["spec"]["template"]["metadata"]["labels"]
        assert GKE_POD_LABELS.items() <= labels.items()
    # a worker lost to Spot fails the whole JobSet: the step retries and resumes from the
    # checkpoint the on-demand chief wrote
    assert manifest["spec"]["failurePolicy"] == {"maxRestarts": 0}


def test_every_pod_finds_its_own_host_and_only_the_chief_is_chief():
    manifest = js.finish(gke.jobset_template(MIXED, "img:1"), "gkeflow-train-x", "ns", "",
                         ["--a"])
    seen = {}
    for job in manifest["spec"]["replicatedJobs"]:
        container = job["template"]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container["env"]}
        hosts = env[cluster.HOSTS_ENV].split(",")
        assert len(hosts) == MIXED.replicas
        for pod in range(job["template"]["spec"]["parallelism"]):  # what Kubernetes sets
            config = cluster.tf_config_from_env({**env, cluster.JOB_INDEX_ENV: "0",
                                                 cluster.COMPLETION_INDEX_ENV: str(pod)})
            index = json.loads(config)["task"]["index"]
            assert hosts[index].startswith(f"gkeflow-train-x-{job['name']}-0-{pod}.")
            seen[index] = (job["name"], is_chief(config))
    assert sorted(seen) == list(range(MIXED.replicas))
    assert [name for name, chief in seen.values() if chief] == ["chief"]


def test_the_task_s_kubernetes_settings_reach_chief_and_workers():
    template = gke.jobset_template(MIXED, "img:1")
    merged, _notes = merge_task_config(template, {"env": [{"name": "X", "value": "1"}]})
    for job in merged["spec"]["replicatedJobs"]:
        env = job["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "X", "value": "1"} in env


@pytest.mark.parametrize("target, changes, message", [
    ("vertex", {}, "cannot run on Vertex AI: a CustomJob has one scheduling strategy"),
    ("gke", {"scheduling": "standard"}, "applies to scheduling=spot only"),
    ("gke", {"replicas": 1}, "needs a multi-node GPU or CPU step"),
])
def test_mixed_capacity_is_refused_where_it_cannot_apply(target, changes, message):
    problems = profile_problems("train-model", MIXED.with_overrides(**changes), target)
    assert any(message in problem for problem in problems), problems
    assert all("\n" not in problem for problem in problems)


def test_an_unknown_chief_scheduling_is_refused():
    with pytest.raises(ComputeError, match="chief_scheduling must be standard"):
        MIXED.with_overrides(chief_scheduling="spot")


def test_the_cost_is_one_on_demand_chief_plus_spot_workers():
    name = machine_type(MIXED, "gke")
    today = date.today()
    rows = tuple(Price(kind, item, capacity, "us-central1", rate, "t", today)
                 for kind, item, capacity, rate in (
                     ("machine", name, "standard", 1.0), ("machine", name, "spot", 0.25),
                     ("gpu", "nvidia-l4", "standard", 0.5), ("gpu", "nvidia-l4", "spot", 0.2)))
    cost = step_cost("train-model", MIXED, "gke", "us-central1", today=today, prices=rows)
    standard, spot = 1.0 + 0.5, 0.25 + 0.2
    assert cost.usd_per_hour == pytest.approx(standard + (MIXED.replicas - 1) * spot)
    assert cost.on_demand_usd_per_hour == pytest.approx(MIXED.replicas * standard)
    assert cost.ceiling_usd == pytest.approx(cost.usd_per_hour * MIXED.timeout_s / 3600)
    no_spot = rows[:1] + rows[2:3]
    missing = step_cost("train-model", MIXED, "gke", "us-central1", today=today,
                        prices=no_spot)
    assert missing.usd_per_hour is None and "spot" in missing.reason
