"""Gradient-boosted trees across several workers: XGBoost's own collective (a tracker and
its workers, allreduce of gradient histograms and metrics), formed from the ``TF_CONFIG``
every multi-worker engine already gives its workers (local processes, a GKE JobSet, a
Vertex AI CustomJob).

- **Who is who.** A worker's rank is its place in ``TF_CONFIG``'s cluster (the chief, then
  the workers, in order); rank 0 is the chief, which saves.
- **The tracker.** The chief runs XGBoost's ``RabitTracker`` on its own ``TF_CONFIG``
  address (the port the cluster gave it: trees start no TensorFlow server there), and every
  worker joins it by that address.
- **The data.** Each worker trains on its share of the train and eval rows (row ``i`` goes
  to rank ``i % workers``): the histograms, the quantile sketches and the eval metrics are
  summed over all workers, so every worker grows the same trees and stops at the same
  round, as one machine with all rows would; each prints its forest's digest, and only the
  chief exports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

#: Seconds a worker waits for the tracker, and the tracker for every worker.
TRACKER_TIMEOUT_S = 600


@dataclass(frozen=True)
class Collective:
    """This worker's place in the collective."""

    rank: int
    workers: int
    host: str
    port: int
    #: XGBoost threads for this worker: its share of the cores when workers share this
    #: machine (local processes; each polls the collective, and oversubscribed cores make
    #: every round wait), else 0 (XGBoost's own default, every core).
    threads: int = 0

    @property
    def chief(self) -> bool:
        return self.rank == 0

    def share(self, rows: int) -> slice:
        """The rows this worker trains on: every ``workers``-th row from ``rank``."""
        return slice(self.rank, rows, self.workers)


def from_tf_config(tf_config: str) -> Collective | None:
    """This worker's :class:`Collective` from ``TF_CONFIG``; None for one worker."""
    if not tf_config:
        return None
    config = json.loads(tf_config)
    cluster, task = config.get("cluster", {}), config.get("task", {})
    addresses = list(cluster.get("chief", [])) + list(cluster.get("worker", []))
    if len(addresses) < 2:
        return None
    kind, index = task.get("type", "worker"), int(task.get("index", 0))
    rank = index if kind == "chief" else len(cluster.get("chief", [])) + index
    host, _, port = addresses[0].rpartition(":")
    mine = addresses[rank].rpartition(":")[0]
    here = sum(1 for address in addresses if address.rpartition(":")[0] == mine)
    threads = max(1, (os.cpu_count() or 1) // here) if here > 1 else 0
    return Collective(rank, len(addresses), host, int(port), threads)


@contextlib.contextmanager
def joined(collective: Collective) -> Iterator[None]:
    """Inside: XGBoost's training and evaluation are collective over every worker. The
    chief runs the tracker for the duration."""
    import xgboost as xgb
    from xgboost.tracker import RabitTracker

    tracker = None
    if collective.chief:
        tracker = RabitTracker(n_workers=collective.workers, host_ip="0.0.0.0",
                               port=collective.port, sortby="task",
                               timeout=TRACKER_TIMEOUT_S)
        tracker.start()
    args = {"dmlc_tracker_uri": collective.host, "dmlc_tracker_port": collective.port,
            "dmlc_task_id": str(collective.rank), "dmlc_timeout": TRACKER_TIMEOUT_S}
    try:
        with warnings.catch_warnings():
            # a worker that starts before the chief's tracker retries its connection, and
            # XGBoost warns at each retry: the wait is expected, not a fault
            warnings.filterwarnings("ignore", category=UserWarning,
                                    module="xgboost.collective")
            with xgb.collective.CommunicatorContext(**args):
                yield
    finally:
        if tracker is not None:
            tracker.wait_for(TRACKER_TIMEOUT_S)
            tracker.free()
