"""``python -m tests.unit.training_runner DATA MODEL CHECKPOINTS PARAMS [SETUP]``: train as a
step does, in a process of its own that a test can kill or stop (SIGTERM), and print the
result as ``RESULT {json}``. ``SETUP`` is Python run first (a strategy's devices, a fault to
inject); the tests' step server may fork it (tests/step_site/step_zygote.py)."""

import json
import sys
from pathlib import Path


def main(data: str, model: str, ckpt: str, params: dict, setup: str = "") -> None:
    exec(setup, {"__name__": "__setup__", "json": json, "sys": sys})  # noqa: S102 - the test's code
    from gkeflow.components.prepare.logic import Schema
    from gkeflow.components.train.checkpoint import exit_on_preemption
    from gkeflow.components.train.logic import TrainParams, train

    params["hidden_units"] = tuple(params.get("hidden_units", (64, 32)))
    with exit_on_preemption():
        result = train(Path(data), Schema.load(Path(data)), Path(model), TrainParams(**params),
                       checkpoint_dir=ckpt or None)
    print("RESULT " + json.dumps({
        "strategy": result.strategy, "epochs_run": result.epochs_run,
        "resumed_from_epoch": result.resumed_from_epoch, "history": result.history,
        "metrics": result.metrics}))


if __name__ == "__main__":
    main(*sys.argv[1:4], json.loads(sys.argv[4]), *sys.argv[5:6])
