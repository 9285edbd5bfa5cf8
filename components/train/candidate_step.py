"""What a ``train-<family>`` task does: train its family as a candidate of ``model_type:
auto`` into its output folder (see :mod:`~gkeflow.components.train.choose`), or record why
this run does not ask for it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gkeflow.components.progress import say


def run_candidate(arguments: dict[str, Any], dataset_dir: Path, data_uri: str,
                  schema_path: Path, candidate, metrics) -> str:
    """Train (or skip) the family ``arguments["family"]``; the step's one-line summary.

    ``candidate`` and ``metrics`` are the step's output artifacts."""
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.train.candidates import on_tpu_host, skip_reason
    from gkeflow.components.train.choose import (
        deciding_metric,
        fatal_errors,
        record_skipped,
        train_into,
    )
    from gkeflow.components.train.logic import train
    from gkeflow.components.train.params import step_params
    from gkeflow.components.train.preemption import exit_on_preemption
    from gkeflow.components.train.store import checkpoint_mount, resolve_checkpoint_location

    family, task = arguments["family"], arguments["task_name"]
    try:
        params = step_params(arguments)
    except ValueError as exc:
        raise SystemExit(f"{task}: {exc}") from None
    folder = Path(candidate.path)
    if reason := skip_reason(params, family, on_tpu_host(params),
                             arguments.get("pipeline_candidates", "")):
        say(f"candidate {family}: not trained in this run ({reason})")
        entry = record_skipped(folder, family, reason)
    else:
        location = resolve_checkpoint_location(
            arguments["checkpoint_uri"], arguments["checkpoint_root"],
            arguments["pipeline_run_id"], task,
            mount=checkpoint_mount(arguments["workspace_path"]))
        schema = Schema.load(schema_path)
        from gkeflow.components.tracking.candidate_run import (
            close_candidate_run,
            open_candidate_run,
        )
        from gkeflow.components.tracking.live import live_curves
        from gkeflow.components.train.choose import candidate_params

        tracker = open_candidate_run(task, candidate_params(params, family))
        with exit_on_preemption():
            try:
                entry = train_into(folder, family,
                                   deciding_metric(schema, params.label_transform), train,
                                   dataset_dir, schema, params,
                                   checkpoint_dir=location or None, data_uri=data_uri,
                                   live=lambda sampler: [live_curves(tracker, sampler)])
            except BaseException as exc:
                from gkeflow.components.train.preemption import Preempted

                tracker.finish("KILLED" if isinstance(exc, Preempted | KeyboardInterrupt)
                               else "FAILED")
                if isinstance(exc, fatal_errors()) and not isinstance(exc, Preempted):
                    raise SystemExit(f"{task}: {exc}") from None
                raise
        close_candidate_run(tracker, entry)
    for name, value in entry.items():
        if name.startswith(("eval_", "train_")) or name == "seconds":
            if isinstance(value, (int, float)):
                metrics.log_metric(name, round(float(value), 6))
    candidate.metadata.update({"family": family, "status": entry["status"],
                               "reason": entry.get("reason", entry.get("error", ""))})
    return json.dumps({"family": family, **{k: v for k, v in entry.items()
                                           if k not in ("result", "family")}})
