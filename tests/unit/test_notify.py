"""The run notification's logic: payload shapes, when to send, changed parameters, the
secret, and sending to a real local HTTP receiver that fails or is down."""

from __future__ import annotations

import pytest

from gkeflow.components.cloud.retry import RetryPolicy
from gkeflow.components.cloud.run_api import apply_run
from gkeflow.components.notify.logic import (
    ITEM_SEP,
    KV_SEP,
    RunReport,
    changed_parameters,
    cost_lines,
    failed_task_from_message,
    notify,
    parse_parameters,
    payload,
    should_send,
)
from tests.integration.webhook_receiver import WebhookReceiver, down_url

FAST = RetryPolicy(call_timeout_s=2.0, budget_s=2.0, initial_s=0.01, maximum_s=0.05)


def _report(**changes) -> RunReport:
    base = dict(pipeline="gkeflow-training", run="nightly-42", target="gke",
                link="https://kfp.example.com/#/runs/details/r-1", state="FAILED",
                failed_task="train-model", error="ValueError: 1 class",
                duration_s=754.0, parameters={"epochs": "50"})
    return RunReport(**{**base, **changes})


@pytest.mark.parametrize("when, state, expected", [
    ("failure", "FAILED", True), ("failure", "SUCCEEDED", False),
    ("failure", "CANCELLED", True), ("failure", "UNKNOWN", True),
    ("success", "SUCCEEDED", True), ("success", "FAILED", False),
    ("success", "UNKNOWN", False), ("always", "FAILED", True), ("always", "SUCCEEDED", True),
    ("always", "UNKNOWN", True),
])
def test_when_decides_which_endings_are_sent(when, state, expected):
    assert should_send(when, state) is expected


#: Every state each backend can put in the exit handler's PipelineTaskFinalStatus: KFP's
#: ML Metadata Execution.State names, Vertex AI's PipelineTaskDetail.State names, kfp.local's.
BACKEND_CASES = [
    ("gke", "COMPLETE", "SUCCEEDED"), ("gke", "CACHED", "SUCCEEDED"),
    ("gke", "FAILED", "FAILED"), ("gke", "CANCELED", "CANCELLED"),
    ("gke", "RUNNING", "UNKNOWN"), ("gke", "NEW", "UNKNOWN"), ("gke", "UNKNOWN", "UNKNOWN"),
    ("gke", "SUCCEEDED", "UNKNOWN"),  # not a word KFP's driver uses
    ("vertex", "SUCCEEDED", "SUCCEEDED"), ("vertex", "SKIPPED", "SUCCEEDED"),
    ("vertex", "FAILED", "FAILED"), ("vertex", "CANCELLED", "CANCELLED"),
    ("vertex", "PENDING", "UNKNOWN"), ("vertex", "RUNNING", "UNKNOWN"),
    ("vertex", "CANCEL_PENDING", "UNKNOWN"), ("vertex", "CANCELLING", "UNKNOWN"),
    ("vertex", "NOT_TRIGGERED", "UNKNOWN"), ("vertex", "STATE_UNSPECIFIED", "UNKNOWN"),
    ("vertex", "COMPLETE", "UNKNOWN"),  # not a word Vertex AI uses
    ("local", "SUCCEEDED", "SUCCEEDED"), ("local", "FAILED", "FAILED"),
    ("gke", "", "UNKNOWN"), ("vertex", None, "UNKNOWN"), ("elsewhere", "SUCCEEDED", "UNKNOWN"),
]


@pytest.mark.parametrize("target, backend_state, state", BACKEND_CASES)
def test_each_backend_s_states_are_mapped_explicitly(target, backend_state, state):
    from gkeflow.components.cloud.run_states import BACKEND_STATES, final_state

    assert final_state(target, backend_state) == state
    assert final_state(target, (backend_state or "").lower()) == state
    named = {(t, s) for t, s, _ in BACKEND_CASES}
    assert all((t, s) in named for t, states in BACKEND_STATES.items() for s in states)


@pytest.mark.parametrize("target, backend_state, state", BACKEND_CASES)
def test_each_backend_state_is_sent_or_not_as_when_failure_asks(
        target, backend_state, state, monkeypatch):
    report = _report(target=target, state=state, backend_state=backend_state or "",
                     failed_task="", error="")
    with WebhookReceiver() as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)
        line = notify(report, when="failure", shape="slack", policy=FAST)
    if state == "SUCCEEDED":
        assert hook.messages == [] and line.startswith("run succeeded")
        return
    (message,) = hook.messages
    text = message["text"]
    if state == "UNKNOWN":
        assert text.startswith(":grey_question:") and "neither a success nor a failure" in text
        assert repr(backend_state or "no state") in text and "succeeded" not in text
    else:
        assert text.startswith(f":x: gkeflow-training run nightly-42 {state.lower()} after")


def test_every_shape_names_the_run_step_error_and_link():
    report = _report()
    generic = payload(report, "generic")
    assert generic["failed_task"] == "train-model" and generic["error"] == "ValueError: 1 class"
    assert generic["link"].endswith("/r-1") and generic["parameters"] == {"epochs": "50"}
    for shape in ("slack", "google-chat"):
        (text,) = payload(report, shape).values()
        assert "train-model" in text and "ValueError: 1 class" in text
        assert "<https://kfp.example.com/#/runs/details/r-1|nightly-42>" in text
        assert "12m34s" in text and "epochs=50" in text


def test_parameters_that_differ_from_defaults():
    text = ITEM_SEP.join(f"{k}{KV_SEP}{v}" for k, v in [
        ("epochs", "20"), ("learning_rate", "0.05"), ("model_type", "mlp"),
        ("shuffle", "True"), ("data_uri", "gs://b/new.csv")])
    defaults = {"epochs": 20, "learning_rate": 0.01, "model_type": "mlp", "shuffle": True,
                "data_uri": "embedded://penguins"}
    assert changed_parameters(parse_parameters(text), defaults) == {
        "learning_rate": "0.05", "data_uri": "gs://b/new.csv"}


def test_the_failed_step_is_read_from_a_vertex_status_message():
    message = ("The DAG failed because some tasks failed. The failed tasks are: "
               "[train-model].; Job (project_id = p, job_id = 1) is failed")
    assert failed_task_from_message(message) == "train-model"
    assert failed_task_from_message("Task exit-handler-1 failed.") == ""


def test_task_details_fill_the_step_error_duration_and_gate():
    report = _report(failed_task="", error="Task exit-handler-1 failed.", duration_s=None)
    tasks = [{"name": "exit-handler-1", "state": "FAILED", "error": "group", "metadata": {}},
             {"name": "prepare-data", "state": "SUCCEEDED", "error": "", "metadata": {}},
             {"name": "train-model", "state": "FAILED", "error": "ValueError: x",
              "metadata": {}}]
    apply_run(report, "2026-03-02T02:00:00Z", tasks, now=1772416800.0 + 600)
    assert (report.failed_task, report.error, report.duration_s) == (
        "train-model", "ValueError: x", 600.0)
    ok = _report(state="SUCCEEDED", failed_task="", error="")
    apply_run(ok, "", [{"name": "evaluate-model", "state": "SUCCEEDED", "error": "",
                        "metadata": {}},
                       {"name": "register-model", "state": "SUCCEEDED", "error": "",
                        "metadata": {"output:model_version": "7"}}], now=0)
    assert ok.gate == "passed: registered" and ok.registered_version == "7"


def test_a_message_is_sent_once_and_a_503_is_retried(monkeypatch):
    with WebhookReceiver(fail_first=1) as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)
        line = notify(_report(), when="failure", shape="slack", policy=FAST)
    assert line == "notification sent (slack, HTTP 200)"
    assert hook.attempts == 2 and len(hook.messages) == 1
    assert "T0P-SECRET" not in line and "T0P-SECRET" not in str(hook.messages)


def test_an_endpoint_that_is_down_is_reported_in_one_line_without_the_url(monkeypatch):
    url = down_url()
    monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", url)
    line = notify(_report(), when="failure", shape="generic", policy=FAST)
    assert line.startswith("notification not sent") and "\n" not in line
    assert "T0P-SECRET" not in line


@pytest.mark.parametrize("url", ["https://hooks.example.com/services/T0P SECRET-9c1e",
                                 "https://hooks.example.com/T0P\nSECRET",
                                 "hooks.example.com/T0P-SECRET", "ftp://x/T0P-SECRET"])
def test_a_malformed_webhook_url_is_named_without_quoting_it(monkeypatch, url):
    monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", " " + url)
    line = notify(_report(), when="failure", shape="generic", policy=FAST)
    assert line.startswith("notification not sent") and "not one http(s) URL" in line
    assert "SECRET" not in line


def test_no_url_and_no_send_are_explained(monkeypatch):
    monkeypatch.delenv("GKEFLOW_WEBHOOK_URL", raising=False)
    assert "GKEFLOW_WEBHOOK_URL is empty" in notify(_report(), when="always", shape="generic",
                                                     policy=FAST)
    assert "no notification" in notify(_report(state="SUCCEEDED"), when="failure",
                                       shape="generic", policy=FAST)


def test_steps_reported_by_their_display_names_are_recognised():
    from gkeflow.pipelines.targets.runs import RunInfo, TaskInfo, step_key

    assert step_key("Train model") == step_key("train-model") == "train-model"
    run = RunInfo("gke", "r", "r", "training", "SUCCEEDED", tasks=[
        TaskInfo("Evaluate model", "SUCCEEDED"), TaskInfo("Register model", "SUCCEEDED")])
    assert run.gate == "passed: registered"
    report = _report(state="SUCCEEDED", failed_task="", error="")
    apply_run(report, "", [{"name": "Evaluate model", "state": "SUCCEEDED", "error": "",
                            "metadata": {}}], now=0)
    assert report.gate == "blocked: not registered"


@pytest.mark.parametrize("raw, budget", [("", 60.0), ("4", 4.0), ("0.5", 0.5), ("-1", 60.0),
                                         ("soon", 60.0)])
def test_the_send_budget_is_a_minute_unless_told_otherwise(raw, budget, monkeypatch, capsys):
    from gkeflow.components.notify.logic import BUDGET_ENV, send_policy

    monkeypatch.setenv(BUDGET_ENV, raw)
    policy = send_policy()
    assert policy.budget_s == budget
    assert policy.call_timeout_s == min(10.0, budget)
    assert ("not a positive number" in capsys.readouterr().out) == (raw in ("-1", "soon"))


ODD_ERROR = "ValueError: NaN loss & batch 512 <train.py:88> *not bold* <users/all>"


def test_a_slack_message_escapes_slack_s_control_characters(monkeypatch):
    report = _report(error=ODD_ERROR, parameters={"query": "a<b & c>d"},
                     link="https://kfp.example.com/#/runs/details/r-1?a=1&b=2")
    with WebhookReceiver(slack=True) as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)
        line = notify(report, when="failure", shape="slack", policy=FAST)
    assert line == "notification sent (slack, HTTP 200)" and not hook.rejected
    (text,) = hook.messages[0].values()
    assert ("error: ValueError: NaN loss &amp; batch 512 &lt;train.py:88&gt; *not bold* "
            "&lt;users/all&gt;") in text
    assert "query=a&lt;b &amp; c&gt;d" in text
    assert text.endswith("<https://kfp.example.com/#/runs/details/r-1?a=1&amp;b=2|nightly-42>")


def test_the_slack_receiver_refuses_unescaped_text(monkeypatch):
    from gkeflow.components.notify.logic import post

    with WebhookReceiver(slack=True) as hook:
        with pytest.raises(Exception, match="HTTP 400"):
            post(hook.url, {"text": "error <train.py:88>"}, FAST)
    assert hook.rejected == ["error <train.py:88>"]


def test_a_google_chat_message_keeps_the_error_as_written_in_a_monospace_block(monkeypatch):
    report = _report(error=ODD_ERROR + " ```x```")
    with WebhookReceiver() as hook:
        monkeypatch.setenv("GKEFLOW_WEBHOOK_URL", hook.url)
        notify(report, when="failure", shape="google-chat", policy=FAST)
    (text,) = hook.messages[0].values()
    head, opening, *block, link = text.split("\n")
    assert head == "*gkeflow-training run nightly-42 failed after 12m34s*"
    assert opening == "```" and block[-1] == "```" and "```" not in "".join(block[:-1])
    assert ("error: ValueError: NaN loss & batch 512 <train.py:88> *not bold* <users/all> "
            "`\u200b`\u200b`x`\u200b`\u200b`") in block
    assert "&lt;" not in text and "&amp;" not in text  # Chat shows entities as they are
    assert link == "<https://kfp.example.com/#/runs/details/r-1|nightly-42>"


@pytest.mark.parametrize("steps, state", [
    (["SUCCEEDED", "SUCCEEDED", "SKIPPED"], "SUCCEEDED"),
    (["SUCCEEDED", "FAILED", "SKIPPED"], "FAILED"),
    (["SUCCEEDED", "CANCELLED"], "CANCELLED"),
    (["SUCCEEDED", "RUNNING"], "UNKNOWN"),
    ([], "UNKNOWN"),
])
def test_a_state_that_is_no_end_is_settled_from_the_run_s_steps(steps, state):
    """KFP hands the exit task RUNNING for a group holding a ParallelFor (#13321)."""
    tasks = [{"name": f"step-{i}", "state": s, "error": "", "metadata": {}}
             for i, s in enumerate(steps)]
    tasks += [{"name": "exit-handler-1", "state": "RUNNING", "error": "", "metadata": {}},
              {"name": "Notify", "state": "RUNNING", "error": "", "metadata": {}}]
    report = _report(state="UNKNOWN", backend_state="RUNNING", failed_task="", error="")
    apply_run(report, "", tasks, now=0)
    assert report.state == state
    text = payload(report, "slack")["text"]
    if state == "UNKNOWN":
        assert "in state 'RUNNING' on gke" in text
    else:
        assert f"{state.lower()} after 12m34s (read from its steps: gke said RUNNING)" in text
    settled = _report(state="SUCCEEDED", backend_state="COMPLETE")  # an end stays as it is
    apply_run(settled, "", tasks, now=0)
    assert settled.state == "SUCCEEDED" and "read from its steps" not in settled.summary()


RATES = {"region": "us-central1", "run_fee_usd": 0.0, "steps": {
    "train-model": {"usd_per_hour": 4.0, "reason": "", "source": "src", "date_read": "2026-12-01"},
    "prepare-data": {"usd_per_hour": None, "reason": "a CPU-only step runs on a shared node "
                                                     "pool", "source": "", "date_read": ""},
}}


def test_the_cost_is_each_step_s_duration_times_its_rate_with_the_total_labelled():
    rates = {**RATES, "steps": {"train-model": RATES["steps"]["train-model"]}}
    lines = cost_lines({**rates, "run_fee_usd": 0.5}, {"train-model": 5400.0, "notify": 3.0})
    hourly = rates["steps"]["train-model"]["usd_per_hour"]
    assert lines[0] == (f"cost (estimate from list prices, us-central1): "
                        f"${hourly * 1.5 + 0.5:,.2f} in all, with the run fee $0.50")
    assert lines[1] == f"cost of train-model: 1h30m x ${hourly:,.2f}/h = ${hourly * 1.5:,.2f}"
    assert lines[2] == "prices: src (published, data of 2026-12-01)"


def test_a_launcher_pod_is_priced_for_its_step_s_duration():
    launcher = {"usd_per_hour": 0.06, "source": "cpu-src", "date_read": "2026-12-03",
                "data_date": "2026-07-30", "basis": "published", "derived": "estimate: x"}
    rates = {**RATES, "steps": {"train-model": RATES["steps"]["train-model"],
                                "train-model (launcher)": launcher}}
    lines = cost_lines(rates, {"train-model": 3600.0})
    hourly = rates["steps"]["train-model"]["usd_per_hour"]
    assert lines[0].endswith(f"${hourly + 0.06:,.2f} in all")
    assert "cost of train-model (launcher): 1h00m x $0.06/h (estimate) = $0.06" in lines
    assert "prices: cpu-src (published, data of 2026-07-30)" in lines


def test_the_ceiling_compiled_in_is_said_beside_the_total():
    rates = {**RATES, "steps": {"train-model": RATES["steps"]["train-model"]},
             "ceiling_usd": 24.5}
    (head, *_rest) = cost_lines(rates, {"train-model": 3600.0})
    assert head == ("cost (estimate from list prices, us-central1): $4.00 in all; ceiling "
                    "$24.50 (every step to its timeout)")


def test_the_expected_cost_is_each_priced_step_at_its_median_over_earlier_runs():
    from gkeflow.components.notify.logic import expected_usd

    rates = {**RATES, "steps": {"train-model": RATES["steps"]["train-model"]},
             "run_fee_usd": 0.5}
    history = [{"train-model": 3600.0}, {"train-model": 1800.0}, {"train-model": 7200.0}]
    assert expected_usd(rates, history) == 0.5 + 4.0  # median 1 h at $4.00/h
    assert expected_usd(rates, []) is None
    assert expected_usd(RATES, [{"prepare-data": 60.0}]) is None  # no rate for it
    (head, *_rest) = cost_lines(rates, {"train-model": 3600.0}, history)
    assert "; expected $4.50 (median step durations of 3 earlier runs)" in head


def test_a_derived_rate_is_marked_an_estimate():
    step = {**RATES["steps"]["train-model"], "derived": "estimate: Compute Engine's Spot rate"}
    lines = cost_lines({**RATES, "steps": {"train-model": step}}, {"train-model": 3600.0})
    assert lines[1] == "cost of train-model: 1h00m x $4.00/h (estimate) = $4.00"


def test_a_step_without_a_rate_leaves_the_total_missing_never_guessed():
    lines = cost_lines(RATES, {"prepare-data": 60.0, "train-model": 900.0})
    assert lines[0].startswith("cost (estimate from list prices, us-central1): total missing "
                               "(no figure for prepare-data: a CPU-only step")
    priced = RATES["steps"]["train-model"]["usd_per_hour"] * 900 / 3600
    assert lines[0].endswith(f"at least ${priced:,.2f} from the priced steps")
    assert cost_lines(RATES, {"train-model": None})[0].startswith(
        "cost (estimate from list prices, us-central1): total missing (no figure for "
        "train-model: no duration)")
    assert cost_lines({}, {"train-model": 60.0}) == []  # compiled without rates: nothing


def test_step_durations_come_from_the_task_details_and_trials_add_up():
    report = RunReport(pipeline="p", run="r", link="l", state="SUCCEEDED", target="gke")
    tasks = [{"name": "Train model", "state": "SUCCEEDED", "error": "", "metadata": {},
              "duration_s": 60.0},
             {"name": "train-model", "state": "SUCCEEDED", "error": "", "metadata": {},
              "duration_s": 30.0},
             {"name": "evaluate-model", "state": "SKIPPED", "error": "", "metadata": {},
              "duration_s": None}]
    apply_run(report, "2026-12-01T00:00:00Z", tasks, 0.0)
    assert report.step_durations == {"train-model": 90.0}
    report.cost = cost_lines(RATES, report.step_durations)
    hourly = RATES["steps"]["train-model"]["usd_per_hour"]
    assert (f"cost of train-model: 1m30s x ${hourly:,.2f}/h = ${hourly * 90 / 3600:,.2f}"
            in report.summary())
