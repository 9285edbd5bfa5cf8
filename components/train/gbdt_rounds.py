"""The rounds of gradient-boosted trees' training: each round's results, early stopping on
the eval split, checkpoints (the booster and :class:`BoostState`, ``state.json`` last: the
commit point), SIGTERM, live curves and progress lines, as one XGBoost training callback."""

from __future__ import annotations

import math
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field

#: The committed booster of a checkpoint (XGBoost's UBJSON model format).
_BOOSTER = "booster-{rounds:06d}-{nonce}.ubj"


@dataclass
class BoostState:
    """What a retry needs besides the booster: rounds done, curves, early-stopping state."""

    rounds_completed: int = 0
    booster_file: str = ""
    history: dict[str, list[float]] = field(default_factory=dict)
    best_round: int = 0  # 1-based; 0 = none yet
    best_value: float = math.inf
    wait: int = 0
    stopped_early: bool = False


def read_boost_state(store) -> tuple[BoostState, object] | None:
    found = store.read_state()
    if found is None:
        return None
    payload, token = found
    known = set(BoostState.__dataclass_fields__)
    state = BoostState(**{k: v for k, v in payload.items() if k in known})
    if not state.booster_file or not store.exists(state.booster_file):
        print(f"checkpoint state in {store.uri} names no booster; starting from scratch")
        return None
    return state, token


def make_round_callback(store, state: BoostState, token, every: int, patience: int,
                        live: list, log_every: int, total: int):
    """XGBoost's training callback: records each round's eval results, applies early
    stopping, commits checkpoints, stops on SIGTERM, feeds the live curves and prints
    progress."""
    import xgboost as xgb

    class Rounds(xgb.callback.TrainingCallback):
        def __init__(self):
            super().__init__()
            self.state, self.token = state, token
            self.preempted = False
            self.signal_at: float | None = None
            self.started = time.perf_counter()
            self.last_print = self.started
            self.first_round = state.rounds_completed

        def handler(self, signum, frame):
            if not self.preempted:
                self.preempted, self.signal_at = True, time.perf_counter()

        def commit(self, model) -> None:
            if store is None:
                return
            staging = store.staging()
            try:
                name = _BOOSTER.format(rounds=self.state.rounds_completed,
                                       nonce=uuid.uuid4().hex[:8])
                model.save_model(str(staging / "booster.ubj"))
                store.put(staging / "booster.ubj", name)
                payload = {**asdict(self.state), "booster_file": name}
                self.token = store.commit(payload, self.token)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            self.state.booster_file = name
            for old in store.names():
                if old not in ("state.json", name):
                    store.delete(old)

        def after_iteration(self, model, epoch, evals_log):
            values = {f"{split}_{metric}": float(scores[-1])
                      for split, metrics in evals_log.items()
                      for metric, scores in metrics.items()}
            for name, value in values.items():
                self.state.history.setdefault(name, []).append(value)
            # XGBoost counts the rounds of this call from 0, also when it continues a booster
            done = self.state.rounds_completed = self.state.rounds_completed + 1
            monitored = next((v for k, v in values.items() if k.startswith("eval_")), None)
            if monitored is not None:
                if monitored < self.state.best_value:
                    self.state.best_value, self.state.best_round = monitored, done
                    self.state.wait = 0
                else:
                    self.state.wait += 1
                    self.state.stopped_early = bool(patience and self.state.wait >= patience)
            if (done - 1) % log_every == 0 or done == total or self.state.stopped_early:
                logs = {("val_loss" if k.startswith("eval_") else "loss"): v
                        for k, v in values.items()}
                for callback in live:
                    callback.on_epoch_end(done - 1, logs)
            now = time.perf_counter()
            if now - self.last_print >= 10 or done == total or self.state.stopped_early:
                self.last_print = now
                rate = (done - self.first_round) / max(now - self.started, 1e-9)
                left = (total - done) / rate if rate > 0 else 0
                shown = ", ".join(f"{k} {v:.4f}" for k, v in values.items())
                from gkeflow.components.progress import say

                say(f"round {done}/{total}: {shown}; {now - self.started:.0f} s, at most "
                    f"{left:.0f} s left")
            if self.preempted or self.state.stopped_early or (
                    every and done % every == 0):
                self.commit(model)
            return self.preempted or self.state.stopped_early

    return Rounds()
