"""The run notification: an exit task that reports how a pipeline run ended to a webhook."""
