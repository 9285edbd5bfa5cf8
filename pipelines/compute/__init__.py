"""What a step runs on: compute profiles declared once and applied per target (``profiles``),
the GPU catalogue and accelerator rules, capacity (Spot, flex-start, reservations, queues),
the engines that run training beyond one pod (``engines``: local workers, Vertex AI
CustomJob and tuning jobs, GKE JobSet), and the GKE workspace, scratch and checkpoint volumes.

May import :mod:`gkeflow.components` only (and kfp); never the CLI, the targets or the
pipeline definitions.
"""
