"""Talking to clouds that fail sometimes: one retry policy (:mod:`.retry`) for every remote
call the suite makes, and one follower (:mod:`.follow`) for every paid job a step launches
(Vertex AI CustomJob, HyperparameterTuningJob, BatchPredictionJob, GKE JobSet).

Standard library only at import time; client libraries are imported where they are used.
"""
