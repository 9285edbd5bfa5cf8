"""Where every worker of a multi-worker run resumes from: the chief's last committed checkpoint.

Only the chief writes the shared checkpoint store (``gs://...``, ``checkpoint_uri`` or the
run's mounted volume). Every other worker resumes from what the chief committed there, read
through :class:`ReadOnlyStore` (any write raises :class:`ReadOnlyStoreError`), and saves what
MultiWorkerMirroredStrategy makes every worker save into a private directory
(:class:`WorkerStore`).

Agreeing on the resume point
----------------------------
All replicas must start from the same epoch, weights and early-stopping state, or their
collective operations stop lining up (a hang or silently different models). Having every
worker read ``state.json`` on its own is not enough: a writer the workers cannot see (an
earlier attempt of the step still running on a node being torn down) may commit between the
chief's read and a worker's. So **the chief decides and broadcasts**: it reads the last
committed state once (:func:`~gkeflow.components.train.checkpoint.read_checkpoint`, which
also checks that the model it names exists), and sends that state to every worker through
the strategy's own collectives (:func:`broadcast_from_chief`) before the model is built,
i.e. before any training collective. Workers never read ``state.json`` themselves: they use
the broadcast state and fetch the immutable objects it names (objects are never
overwritten, so a name means one content). The chief cannot commit again before the first
training step, which needs every worker, so nothing of this attempt moves the committed
state between the decision and the fetches. If a stray writer deletes the named objects in
that window, the worker's fetch fails and the step fails (and is retried), and that writer's
commit also makes the chief's next commit fail with
:class:`~gkeflow.components.train.store.CheckpointConflict` on Cloud Storage.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from gkeflow.components.train.store import Scratch


class ReadOnlyStoreError(PermissionError):
    """A worker tried to write the shared checkpoint store, which only the chief writes."""


class ReadOnlyStore:
    """A read-only view of a checkpoint store: reads pass through, writes raise.

    Staging (scratch space for fetched objects) is a private temporary directory, so not
    even scratch files appear in a shared directory.
    """

    def __init__(self, store):
        self._store = store
        self.uri = store.uri
        self._scratch = Scratch("gkeflow-ckpt-ro-")

    def staging(self) -> Path:
        return self._scratch.directory()

    def read_state(self):
        return self._store.read_state()

    def exists(self, name: str) -> bool:
        return self._store.exists(name)

    def fetch(self, name: str, destination: Path) -> Path:
        return self._store.fetch(name, destination)

    def names(self) -> list[str]:
        return self._store.names()

    def _refuse(self, action: str):
        raise ReadOnlyStoreError(f"a worker may not {action} in the shared checkpoint store "
                                 f"{self.uri}: only the chief writes it")

    def put(self, source: Path, name: str) -> None:
        self._refuse(f"write {name}")

    def commit(self, state: dict, token: object) -> object:
        self._refuse("commit state.json")

    def delete(self, name: str) -> None:
        self._refuse(f"delete {name}")

    def remove_all(self) -> None:
        self._refuse("remove checkpoints")


class WorkerStore:
    """A non-chief worker's checkpoint store: writes go to a private directory; objects it
    has not written itself (the best weights of the chief's commit it resumed from) are read
    from the shared store, read-only."""

    def __init__(self, private, shared: ReadOnlyStore | None):
        self.private = private
        self.shared = shared
        self.uri = private.uri

    def staging(self) -> Path:
        return self.private.staging()

    def read_state(self):
        return self.private.read_state()

    def exists(self, name: str) -> bool:
        return self.private.exists(name) or bool(self.shared and self.shared.exists(name))

    def fetch(self, name: str, destination: Path) -> Path:
        if self.private.exists(name) or self.shared is None:
            return self.private.fetch(name, destination)
        return self.shared.fetch(name, destination)

    def put(self, source: Path, name: str) -> None:
        self.private.put(source, name)

    def commit(self, state: dict, token: object) -> object:
        return self.private.commit(state, token)

    def names(self) -> list[str]:
        return self.private.names()

    def delete(self, name: str) -> None:
        self.private.delete(name)

    def remove_all(self) -> None:
        self.private.remove_all()


def _sum_over_replicas(strategy, values, contribute: bool):
    """Sum of ``values`` over workers, counting each worker's first local replica only."""
    import numpy as np
    import tensorflow as tf

    local = max(1, strategy.num_replicas_in_sync // max(1, _workers(strategy)))
    tensor = tf.constant(np.asarray(values, dtype=np.float32))
    zeros = tf.zeros_like(tensor)

    def replica_fn():
        context = tf.distribute.get_replica_context()
        first_local = tf.equal(context.replica_id_in_sync_group % local, 0)
        return tf.where(tf.logical_and(first_local, contribute), tensor, zeros)

    per_replica = strategy.run(tf.function(replica_fn))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy()


def _workers(strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    return sum(len(v) for k, v in spec.items() if k in ("chief", "worker")) or 1


def broadcast_from_chief(strategy, payload: bytes, chief: bool) -> bytes:
    """``payload`` of the chief, delivered to every worker through the strategy's collectives.

    Two all-reduces: the length, then the bytes (as float32, exact for 0..255), every worker
    other than the chief contributing zeros. Every worker must call this at the same point.
    """
    import numpy as np

    length = int(round(float(_sum_over_replicas(
        strategy, [len(payload) if chief else 0], chief)[0])))
    if length == 0:
        return b""
    buffer = np.zeros(length, dtype=np.float32)
    if chief:
        buffer[:] = np.frombuffer(payload, dtype=np.uint8)
    summed = _sum_over_replicas(strategy, buffer, chief)
    return bytes(np.rint(summed).astype(np.uint8).tolist())


def agree_on_checkpoint(strategy, chief: bool, store):
    """The checkpoint every worker resumes from: ``(state, token)`` as the chief read it from
    ``store``, or None to start from scratch.

    The chief reads the committed state and broadcasts it; other workers take the broadcast
    (their token is None: they never commit to the shared store). ``store`` may be None on
    a worker that has no checkpoint location; the chief's decision still applies, but a
    worker without a store cannot fetch a checkpoint and fails with a message saying so.
    """
    from gkeflow.components.train.checkpoint import CheckpointState, read_checkpoint

    found = read_checkpoint(store) if (chief and store is not None) else None
    payload = json.dumps(asdict(found[0])).encode() if found else b""
    if chief:
        print(f"chief: resume point {found[0].epochs_completed if found else 0} epochs "
              "completed; sending it to the workers", flush=True)
    received = broadcast_from_chief(strategy, payload, chief)
    if chief:
        return found
    if not received:
        return None
    if store is None:
        raise RuntimeError("the chief resumes from a checkpoint but this worker has no "
                           "checkpoint location; give every worker the same checkpoint_uri")
    known = set(CheckpointState.__dataclass_fields__)
    state = CheckpointState(**{k: v for k, v in json.loads(received).items() if k in known})
    return state, None
