"""The gkeflow.yaml model, validated at the edge: every section's settings, the checks of
pipeline parameters before any step, schedules' cron expressions. Imports only components."""
