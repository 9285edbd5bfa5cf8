"""Talking to clouds that fail sometimes: one retry policy (:mod:`.retry`) for every remote
call the suite makes, and one follower (:mod:`.follow`) for every paid job a step launches
(Vertex AI CustomJob, HyperparameterTuningJob, BatchPredictionJob, GKE JobSet).

- :mod:`.retry`: backoff with jitter on transient errors, a per-call timeout, a budget;
- :mod:`.follow`: create-or-attach, follow, stop only on SIGTERM or a final give-up,
  one-line endings;
- :mod:`.vertex`: the three Vertex AI job kinds as one follower ``Remote``;
- :mod:`.options`: ``--call-timeout`` / ``--retry-budget`` / ``--debug`` and their
  environment variables, declared once.

See docs/scale-out-reliability.md. Standard library only at import time; client libraries
are imported where they are used.
"""
