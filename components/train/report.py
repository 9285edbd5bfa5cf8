"""What a training step returns: one JSON report that a sweep's selection step and a run
summary read back (:mod:`gkeflow.components.sweep.logic`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence


def trial_report(task_name: str, model_uri: str, metrics: Mapping[str, float] | None = None,
                 error: str = "", warnings: Sequence[str] = (), status: str = "") -> str:
    """What a training step returns: the JSON a selection step (and a run summary) reads
    back. ``warnings``: one-line findings such as low GPU utilisation. ``status``: failed
    with an error, else succeeded, unless given (a sweep's scheduler ``stopped`` a trial)."""
    return json.dumps({
        "trial_id": task_name,
        "status": status or ("failed" if error else "succeeded"),
        "metrics": {k: float(v) for k, v in (metrics or {}).items()},
        "model_uri": model_uri,
        "error": error[-2000:],
        "warnings": list(warnings),
    }, sort_keys=True)
