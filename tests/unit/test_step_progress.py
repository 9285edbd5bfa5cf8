"""A long step's progress lines reach `gkeflow run`'s console at its default verbosity."""

from __future__ import annotations

import io

from gkeflow.components.progress import MARK, Throttle, progress_text, say


def test_progress_lines_are_marked_and_read_back(capsys):
    say("round 3/10: eval_logloss 0.21")
    line = capsys.readouterr().out.strip()
    assert line == f"{MARK}round 3/10: eval_logloss 0.21"
    assert progress_text(f"    [KFP Executor] {line}") == "round 3/10: eval_logloss 0.21"
    assert progress_text("round 3/10 without the mark") is None


def test_a_throttle_lets_one_line_through_per_interval():
    now = [0.0]
    throttle = Throttle(10.0, clock=lambda: now[0])
    assert not throttle.due()
    now[0] = 10.5
    assert throttle.due() and not throttle.due()
    assert throttle.due(final=True)


def test_the_local_run_passes_a_steps_progress_to_the_console():
    from rich.console import Console

    from gkeflow.pipelines.cli.run_options import step_printer
    from gkeflow.pipelines.targets.local import EventStream

    shown = io.StringIO()
    stream = EventStream(io.StringIO(), None, step_printer(Console(file=shown, width=200)))
    stream.write("Executing task 'train-model'\n")
    stream.write(f"    {MARK}candidate gbdt training (1 of 3)\n")
    stream.write("    Epoch 1/20 (not a progress line)\n")
    stream.write("Task 'train-model' finished with status SUCCESS\n")
    lines = shown.getvalue().splitlines()
    assert lines[0].strip().endswith("train-model started")
    assert lines[1] == "    train-model: candidate gbdt training (1 of 3)"
    assert "Epoch 1/20" not in shown.getvalue()
    assert "train-model success" in lines[2]
    assert stream.steps["train-model"].status == "SUCCESS"
