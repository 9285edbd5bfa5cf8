"""The gkeflow.yaml model, validated at the edge: every section's settings, the checks of
pipeline parameters before any step, schedules' cron expressions. Imports only components."""

from gkeflow.pipelines.settings import autopilot as _autopilot  # noqa: F401  (registers it)
