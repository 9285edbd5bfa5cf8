"""gkeflow.yaml errors are one line (key path, problem, fix; no pydantic URL, never the
value given), and a mistyped key at any level is answered with the key it most resembles."""

from __future__ import annotations

import pytest
import yaml

from gkeflow.components.did_you_mean import did_you_mean
from gkeflow.pipelines.compute.profiles import ComputeError, apply_overrides
from gkeflow.pipelines.settings.config import ConfigError, load_config


def _error(tmp_path, raw: dict) -> str:
    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "\n" not in message and "pydantic" not in message and "http" not in message
    return message


@pytest.mark.parametrize("raw, expected", [
    ({"images": {"regsitry": "europe-docker.pkg.dev/p/r"}},
     "images.regsitry: unknown key (did you mean 'registry'?); remove or rename it"),
    ({"registy": {}}, "registy: unknown key (did you mean 'registry'?)"),
    ({"deploy": {"prod": {"trafic": 10}}},
     "deploy.prod.trafic: unknown key (did you mean 'traffic'?)"),
    ({"schedules": [{"name": "n", "pipeline": "training", "target": "gke",
                     "cron": "0 3 * * *", "max_concurency": 1}]},
     "schedules.0.max_concurency: unknown key (did you mean 'max_concurrency'?)"),
    ({"workspace": {"sizee": "3Gi"}}, "workspace.sizee: unknown key (did you mean 'size'?)"),
    ({"sweep": {"paralel_trials": 2}},
     "sweep.paralel_trials: unknown key (did you mean 'parallel_trials'?)"),
])
def test_a_mistyped_key_at_any_level_names_the_closest(tmp_path, raw, expected):
    assert expected in _error(tmp_path, raw)


@pytest.mark.parametrize("compute, expected", [
    ({"train-modle": {"cpu": "2"}},
     "compute.train-modle: unknown step (did you mean 'train-model'?)"),
    ({"train-model": {"acelerator_count": 2}},
     "compute.train-model: unknown compute field acelerator_count (did you mean "
     "'accelerator_count'?)"),
])
def test_the_compute_section_names_the_closest_step_and_field(tmp_path, compute, expected):
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    path = tmp_path / "gkeflow.yaml"
    path.write_text(yaml.safe_dump({"compute": compute}))
    with pytest.raises(ConfigError) as err:
        load_config(path).compute_overrides(DEFAULT_COMPUTE)
    assert expected in str(err.value)


def test_an_unknown_key_without_a_close_one_lists_the_keys_there(tmp_path):
    message = _error(tmp_path, {"images": {"zzzz": 1}})
    assert message.endswith("images.zzzz: unknown key; remove or rename it (keys here: "
                            "include, lock, registry, requirements, tag)")


def test_several_problems_are_one_line_and_never_echo_the_value(tmp_path):
    message = _error(tmp_path, {"targets": {"vertex": {"project": "p", "region": "s3cr3t-x",
                                                       "pipelne_root": "gs://b/r"}}})
    assert message.count("; targets.vertex.") >= 2, message
    assert "targets.vertex.pipeline_root: required but missing; add it" in message
    assert "targets.vertex.pipelne_root: unknown key (did you mean 'pipeline_root'?)" in message
    assert "Field required" not in message and "Extra inputs" not in message


@pytest.mark.parametrize("override, expected", [
    ("train-modle.cpu=2", "unknown step 'train-modle' (did you mean 'train-model'?)"),
    ("train-model.acelerator=nvidia-l4", "(did you mean 'accelerator'?)"),
])
def test_compute_overrides_name_the_closest_step_and_field(override, expected):
    from gkeflow.pipelines.definitions.training import DEFAULT_COMPUTE

    with pytest.raises(ComputeError) as err:
        apply_overrides(DEFAULT_COMPUTE, [override])
    assert expected in str(err.value)


def test_no_hint_when_nothing_is_close():
    assert did_you_mean("zzz", ["cpu", "memory"]) == ""
    assert did_you_mean("Decision", ["id", "decision"]) == " (did you mean 'decision'?)"


def test_a_dry_run_names_the_example_values_gkeflow_init_wrote(tmp_path):
    from gkeflow.pipelines.settings.config import EXAMPLE_CONFIG, load_config
    from gkeflow.pipelines.settings.config_example import unfilled_placeholders
    from tests.gkeflow_cli import gkeflow

    (tmp_path / "gkeflow.yaml").write_text(EXAMPLE_CONFIG)
    config = load_config(tmp_path / "gkeflow.yaml")
    assert unfilled_placeholders(config.targets.vertex, "targets.vertex") == [
        "targets.vertex.project", "targets.vertex.pipeline_root",
        "targets.vertex.service_account"]
    assert unfilled_placeholders(config.targets.gke, "targets.gke") == ["targets.gke.host"]
    result = gkeflow("submit", "--target", "vertex", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert ("note: targets.vertex.project still holds the example value `gkeflow init` "
            "wrote") in result.stdout
    assert "my-project" not in "".join(line for line in result.stdout.splitlines()
                                       if "note:" in line)
    own = EXAMPLE_CONFIG.replace("my-project", "acme-ml-prod").replace("my-bucket", "acme")
    (tmp_path / "gkeflow.yaml").write_text(own)
    assert "still holds the example value" not in gkeflow(
        "submit", "--target", "vertex", "--dry-run", cwd=tmp_path).stdout
