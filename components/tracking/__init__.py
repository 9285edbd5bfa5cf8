"""MLflow tracking from inside the steps, best effort: a tracking server that is down or
errors never fails a step (see docs/tracking.md)."""
