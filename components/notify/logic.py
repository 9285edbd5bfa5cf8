"""The run notification: what a pipeline's exit task sends when the run ends.

:func:`notify` builds one message from the run's final status (state, the failed task and
its error), its name and link, its duration, the parameters that differ from the
pipeline's defaults and, for training, the gate decision and registered version, and
posts it to a webhook in one of three shapes: ``generic`` JSON, ``slack`` or ``google-chat``
(both read ``text``). Where the exit handler's status does not name the failed step (it
names the exit handler's group), the run API is read for it: Kubeflow Pipelines'
``GET /apis/v2beta1/runs/{id}`` or Vertex AI's ``GET .../pipelineJobs/{id}``.

The webhook URL is a secret: read from an environment variable (GKE: a Kubernetes Secret
mounted by kfp-kubernetes; local runs: the caller's environment) or from Secret Manager
(Vertex AI); it is never printed, never part of the payload and never an input of the step.

A notification never changes the run's outcome: every failure here is caught, printed in
one line and the step succeeds. Sending is retried on transient failures (429, 5xx,
connection errors, timeouts) within a short budget (:class:`RetryPolicy`).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

from gkeflow.components.cloud.retry import RetryPolicy, describe_error
from gkeflow.components.cloud.run_states import (  # how each backend names the run's end
    CANCELLED,
    FAILED,
    SUCCEEDED,
    UNKNOWN,
    final_state,
)

#: Separators of the ``name<KV>value<ITEM>...`` text the pipeline passes its parameters in
#: (placeholders filled by the backend; JSON would break on quotes inside values).
ITEM_SEP, KV_SEP = "\x1e", "\x1f"
WHEN = ("failure", "success", "always")
FORMATS = ("generic", "slack", "google-chat")
#: Where the exit task finds the webhook URL on GKE and in local runs.
WEBHOOK_ENV = "GKEFLOW_WEBHOOK_URL"
#: Bounded: a notification is worth seconds, not the run's time.
SEND_POLICY = RetryPolicy(call_timeout_s=10.0, budget_s=60.0, initial_s=1.0, maximum_s=10.0)
#: Seconds all the tries of one notification may take, instead of SEND_POLICY's minute.
BUDGET_ENV = "GKEFLOW_NOTIFY_BUDGET_S"


def send_policy() -> RetryPolicy:
    """:data:`SEND_POLICY`, with its budget from ``GKEFLOW_NOTIFY_BUDGET_S`` when that is a
    positive number (anything else is said and ignored: the notification still goes)."""
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return SEND_POLICY
    try:
        budget = float(raw)
        if budget <= 0:
            raise ValueError
    except ValueError:
        print(f"{BUDGET_ENV}={raw!r} is not a positive number of seconds; using "
              f"{SEND_POLICY.budget_s:.0f}")
        return SEND_POLICY
    return SEND_POLICY.with_(budget_s=budget,
                             call_timeout_s=min(SEND_POLICY.call_timeout_s, budget))


class NotifyError(RuntimeError):
    """A notification could not be built or sent (reported, never raised out of the step)."""


@dataclass
class RunReport:
    """What the message says; also the ``generic`` JSON payload. ``state`` is SUCCEEDED,
    FAILED, CANCELLED or UNKNOWN (:func:`final_state`); ``backend_state`` is the backend's
    own word for it (KFP: ``COMPLETE``...)."""

    pipeline: str
    run: str
    link: str
    state: str
    target: str
    failed_task: str = ""
    error: str = ""
    duration_s: float | None = None
    parameters: dict[str, str] = field(default_factory=dict)  # differing from defaults
    gate: str = ""
    registered_version: str = ""
    backend_state: str = ""
    step_durations: dict[str, float | None] = field(default_factory=dict)
    cost: list[str] = field(default_factory=list)  # cost_lines(), set before sending

    @property
    def succeeded(self) -> bool:
        return self.state == SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.state in (FAILED, CANCELLED)

    def summary(self) -> str:
        duration = "" if self.duration_s is None else f" after {_duration(self.duration_s)}"
        if self.state == UNKNOWN:
            raw = self.backend_state or "no state"
            head = (f"{self.pipeline} run {self.run} ended{duration} in state {raw!r} on "
                    f"{self.target}, neither a success nor a failure known to gkeflow")
        else:
            head = f"{self.pipeline} run {self.run} {self.state.lower()}{duration}"
            if self.backend_state and final_state(self.target, self.backend_state) == UNKNOWN:
                head += f" (read from its steps: {self.target} said {self.backend_state})"
        lines = [head]
        if self.failed_task:
            lines.append(f"failed step: {self.failed_task}")
        if self.error:
            lines.append(f"error: {self.error}")
        if self.gate:
            lines.append(f"gate: {self.gate}")
        if self.registered_version:
            lines.append(f"registered version: {self.registered_version}")
        lines += self.cost
        if self.parameters:
            lines.append("parameters: " + ", ".join(f"{k}={v}" for k, v in
                                                     sorted(self.parameters.items())))
        return "\n".join(lines)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def slack_escaped(text: str) -> str:
    """``text`` as Slack shows it literally: ``&``, ``<`` and ``>`` are its control
    characters (``<...>`` is a link or a mention) and must be sent as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def chat_block(text: str) -> str:
    """``text`` as a Google Chat monospace block, where Chat applies no formatting (``*``,
    ``_``, ``~``, ``<url|text>`` links and ``<users/...>`` mentions stay as written). Chat
    decodes no HTML entities in text messages, so nothing is entity-escaped; only a run of
    three backquotes, which would end the block, is broken by zero-width spaces."""
    return "```\n" + text.replace("```", "`\u200b`\u200b`") + "\n```"


def _chat_label(text: str) -> str:
    """A Google Chat link's label: no ``<``, ``>`` or ``|``, which end the link."""
    return re.sub(r"[<>|]", "", text)


def payload(report: RunReport, shape: str) -> dict[str, Any]:
    """The webhook body: ``generic`` (every field, plain JSON), ``slack`` (``text`` with
    Slack's three characters escaped) or ``google-chat`` (``text`` with the details in a
    monospace block)."""
    if shape == "generic":
        return {"kind": "gkeflow.run", **asdict(report)}
    icon = (":white_check_mark:" if report.succeeded else ":x:" if report.failed
            else ":grey_question:")
    head, *details = report.summary().split("\n")
    if shape == "slack":
        link = f"<{slack_escaped(report.link)}|{slack_escaped(report.run)}>"
        return {"text": "\n".join([f"{icon} {slack_escaped(head)}",
                                   *map(slack_escaped, details), link])}
    if shape == "google-chat":
        link = f"<{report.link}|{_chat_label(report.run)}>"
        body = [chat_block("\n".join(details))] if details else []
        return {"text": "\n".join([f"*{head.replace('*', '')}*", *body, link])}
    raise NotifyError(f"unknown webhook format {shape!r}; formats: {', '.join(FORMATS)}")


#: The label every cost figure carries (as `gkeflow runs show` and `plan` label theirs).
COST_LABEL = "estimate from list prices"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def expected_usd(rates: dict[str, Any], history: list[dict[str, float]]) -> float | None:
    """The run's expected cost: each priced step at its median duration over ``history``
    (earlier runs' step durations), plus the run fee; None without history, or when a step
    that ran before has no rate."""
    import statistics

    steps = rates.get("steps") or {}
    seen: dict[str, list[float]] = {}
    for run in history:
        for step, seconds in run.items():
            if step in steps:
                seen.setdefault(step, []).append(float(seconds))
    if not seen:
        return None
    total = float(rates.get("run_fee_usd") or 0.0)
    for step, values in seen.items():
        hourly = steps[step].get("usd_per_hour")
        if hourly is None:
            return None
        total += hourly * statistics.median(values) / 3600
    return total


#: The suffix of a launcher pod's entry in the compiled rates (``STEP (launcher)``), as
#: ``gkeflow.pipelines.compute.costing`` names it.
LAUNCHER_SUFFIX = " (launcher)"


def cost_lines(rates: dict[str, Any], durations: dict[str, float | None],
               history: list[dict[str, float]] | None = None) -> list[str]:
    """Each step that ran: its duration x its hourly rate, then the run's total, labelled as
    an estimate from list prices. ``rates`` is what the pipeline compiled in
    (``{"region", "run_fee_usd", "steps": {step: {"usd_per_hour", "reason", "source",
    "date_read", "data_date", "basis", "derived"}}}``); empty: no lines. A ``STEP
    (launcher)`` entry takes STEP's duration. With ``history`` (earlier runs' step
    durations), the expected cost at their medians too. A step without a rate or a duration
    leaves the total missing (with the first such step named), never guessed; a rate derived
    from other prices is marked an estimate."""
    steps = rates.get("steps") or {}
    if not steps or not durations:
        return []
    lines, total, missing = [], float(rates.get("run_fee_usd") or 0.0), []
    sources = set()
    durations = dict(durations)
    for step in steps:  # a job's launcher pod lives as long as its step
        if step.endswith(LAUNCHER_SUFFIX) and step not in durations:
            base = step.removesuffix(LAUNCHER_SUFFIX)
            if base in durations:
                durations[step] = durations[base]
    for step, seconds in durations.items():
        rate = steps.get(step)
        if rate is None:
            continue  # not a priced step of this pipeline (a helper task)
        hourly = rate.get("usd_per_hour")
        if hourly is None or seconds is None:
            missing.append((step, rate.get("reason") or "no rate") if hourly is None
                           else (step, "no duration"))
            continue
        usd = hourly * seconds / 3600
        total += usd
        sources.add(f"{rate.get('source', '')} ({rate.get('basis') or 'published'}, data of "
                    f"{rate.get('data_date') or rate.get('date_read', '')})")
        mark = " (estimate)" if rate.get("derived") else ""
        lines.append(f"cost of {step}: {_duration(seconds)} x {_usd(hourly)}/h{mark} = "
                     f"{_usd(usd)}")
    where = f"{COST_LABEL}, {rates.get('region', '')}"
    if missing:
        step, reason = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        head = (f"cost ({where}): total missing (no figure for {step}{more}: {reason}); "
                f"at least {_usd(total)} from the priced steps")
    else:
        head = f"cost ({where}): {_usd(total)} in all"
    if rates.get("run_fee_usd"):
        head += f", with the run fee {_usd(float(rates['run_fee_usd']))}"
    expected = expected_usd(rates, history or [])
    if expected is not None:
        runs = len(history or [])
        head += (f"; expected {_usd(expected)} (median step durations of {runs} earlier "
                 f"run{'s' if runs != 1 else ''})")
    if rates.get("ceiling_usd") is not None:
        head += f"; ceiling {_usd(float(rates['ceiling_usd']))} (every step to its timeout)"
    return [head, *lines, *(f"prices: {source}" for source in sorted(sources))]


def should_send(when: str, state: str) -> bool:
    """Whether ``when`` asks for a run that ended in ``state`` (:func:`final_state`): every
    end but a success counts as a failure, so an UNKNOWN end is never missed."""
    if when not in WHEN:
        raise NotifyError(f"unknown notification trigger {when!r}; choose {', '.join(WHEN)}")
    return when == "always" or (when == "success") == (state == SUCCEEDED)


def parse_parameters(text: str) -> dict[str, str]:
    """``name<KV>value<ITEM>...`` -> dict."""
    values = {}
    for item in text.split(ITEM_SEP) if text else []:
        name, _, value = item.partition(KV_SEP)
        if name:
            values[name] = value
    return values


def _same(value: str, default: Any) -> bool:
    if isinstance(default, bool):
        return value.strip().lower() == str(default).lower()
    if isinstance(default, (int, float)):
        try:
            return float(value) == float(default)
        except ValueError:
            return False
    return value == str(default)


def changed_parameters(values: dict[str, str], defaults: dict[str, Any],
                       hide: tuple[str, ...] = ()) -> dict[str, str]:
    """The run's parameters whose values differ from the pipeline's defaults."""
    return {name: _shown(value, defaults.get(name)) for name, value in values.items()
            if name not in hide and not (name in defaults and _same(value, defaults[name]))}


def _shown(value: str, default: Any) -> str:
    """An integer parameter as an integer (some backends render numbers as ``1.0``)."""
    if isinstance(default, int) and not isinstance(default, bool):
        try:
            number = float(value)
        except ValueError:
            return value
        return str(int(number)) if number.is_integer() else value
    return value


_FAILED_TASKS = re.compile(r"failed tasks are: \[([^\]]+)\]", re.IGNORECASE)
_INNER_TASK = re.compile(r"Inner task failed: '?([a-z0-9-]+)'?")


def failed_task_from_message(message: str) -> str:
    """The failed step named in an exit handler's error message, if any (Vertex AI: "The
    failed tasks are: [train-model]")."""
    found = _FAILED_TASKS.search(message or "") or _INNER_TASK.search(message or "")
    return found.group(1).split(",")[0].strip() if found else ""


# ---------------------------------------------------------------------------------------------
# The secret and the send


def webhook_url(env_name: str = WEBHOOK_ENV, secret_version: str = "",
                policy: RetryPolicy = SEND_POLICY) -> str:
    """The webhook URL: from Secret Manager when ``secret_version`` names one
    (``projects/P/secrets/S/versions/V``), else from the environment variable."""
    if secret_version:
        return _checked_url(_secret_manager(secret_version, policy), f"secret {secret_version}")
    url = os.environ.get(env_name, "").strip()
    if not url:
        raise NotifyError(f"no webhook URL: the environment variable {env_name} is empty "
                          "(on GKE: the Kubernetes Secret named in notifications.webhook."
                          "gke_secret must exist in the run's namespace)")
    return _checked_url(url, f"the environment variable {env_name}")


def _checked_url(url: str, where: str) -> str:
    """``url`` when it is one http(s) URL; else an error that never quotes it (a webhook
    URL is a secret)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url) if re.fullmatch(r"[\x21-\x7e]+", url) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise NotifyError(f"the webhook URL in {where} is not one http(s) URL (a space, a "
                          "line break or no https://); store the URL alone")
    return url


def _secret_manager(version: str, policy: RetryPolicy) -> str:
    from gkeflow.components.cloud.secret_manager import access_request, secret_value

    session, url = access_request(version)
    name = url.rsplit("/v1/", 1)[-1].removesuffix(":access")

    def access():
        response = session.get(url, timeout=policy.call_timeout_s)
        if response.status_code != 200:
            raise _HttpError(response.status_code, f"Secret Manager answered "
                                                   f"{response.status_code} for {name}")
        return secret_value(response.json())

    return policy.call(access, f"reading secret {name}")


class _HttpError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def post(url: str, body: dict, policy: RetryPolicy = SEND_POLICY) -> int:
    """POST ``body`` as JSON; retried on transient failures; returns the HTTP status."""
    data = json.dumps(body).encode()

    def send() -> int:
        request = urllib.request.Request(url, data=data, method="POST", headers={
            "Content-Type": "application/json; charset=utf-8"})
        try:
            with urllib.request.urlopen(request, timeout=policy.call_timeout_s) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            raise _HttpError(exc.code, f"the webhook answered HTTP {exc.code}") from None

    return policy.call(send, "sending the run notification")


def _safe(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


def notify(report: RunReport, *, when: str, shape: str, env_name: str = WEBHOOK_ENV,
           secret_version: str = "", policy: RetryPolicy = SEND_POLICY) -> str:
    """Send ``report`` if ``when`` asks for its state; returns one line saying what
    happened. Never raises: a notification cannot change the run's outcome."""
    url = ""
    try:
        if not should_send(when, report.state):
            return (f"run {report.state.lower()} ({report.backend_state or 'no state'}): "
                    f"no notification (notifications on {when})")
        body = payload(report, shape)
        url = webhook_url(env_name, secret_version, policy)
        status = post(url, body, policy)
        return f"notification sent ({shape}, HTTP {status})"
    except Exception as exc:  # noqa: BLE001 - a notification must not fail the run
        return _safe(f"notification not sent: {describe_error(exc)}", url)


def now() -> float:
    return time.time()
