"""The task a label asks for, decided before any step: regression for numbers with many
distinct values, classification for text, true/false and few whole numbers; refusals for
labels neither task can learn, unless the task is forced."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gkeflow.components.prepare.sources import DataError
from gkeflow.components.prepare.task import MAX_CLASSES, decide_task, task_summary

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("values,task", [
    (pa.array([str(int(v)) for v in RNG.normal(40_000, 9_000, 600)]), "regression"),
    (pa.array(RNG.lognormal(3, 1, 300)), "regression"),  # floats
    (pa.array([1.5, 2.5, 3.25, 4.0, 7.75] * 20), "regression"),  # few, but not whole
    (pa.array(["yes", "no", "maybe"] * 40), "classification"),
    (pa.array([1, 2, 3, 4, 5] * 40), "classification"),  # a rating
    (pa.array([0.0, 1.0] * 40), "classification"),  # a 0/1 flag as floats
    (pa.array([True, False] * 40), "classification"),
    (pa.array(["5", "3", "4"] * 40, pa.string()), "classification"),  # whole numbers as text
])
def test_auto_reads_the_task_from_the_values(values, task):
    assert decide_task(values, "auto", "y").task == task


def test_a_few_stray_texts_among_many_numbers_stay_a_regression():
    values = [str(v) for v in RNG.normal(100, 10, 400)] + ["unknown", "n/a?"]
    choice = decide_task(pa.array(values), "auto", "price")
    assert choice.task == "regression" and "distinct values" in choice.reason


@pytest.mark.parametrize("values,message", [
    (pa.array(list(range(1000, 1400))), "looks like a row identifier"),
    (pa.array([f"cust-{i}" for i in range(400)]), "looks like an identifier"),
    (pa.array([f"c{i % 300}" for i in range(3000)]), f"has 300 classes, more than {MAX_CLASSES}"),
])
def test_labels_neither_task_can_learn_are_refused_naming_the_count_and_task(values, message):
    with pytest.raises(DataError, match=message) as refused:
        decide_task(values, "auto", "y")
    assert "--task" in str(refused.value) and "\n" not in str(refused.value)


def test_a_forced_task_overrides_the_refusals_it_can_serve():
    many = pa.array([f"c{i % 300}" for i in range(3000)])
    assert decide_task(many, "classification", "y").task == "classification"
    ids = pa.array(list(range(1000, 1400)))
    assert decide_task(ids, "regression", "y").task == "regression"


def test_regression_on_text_is_refused():
    with pytest.raises(DataError, match="task regression needs a numeric label"):
        decide_task(pa.array(["a", "b", "c"] * 10), "regression", "y")
    with pytest.raises(DataError, match="unknown task 'regresion'.*did you mean"):
        decide_task(pa.array([1.0, 2.0]), "regresion", "y")


def test_the_summary_gives_the_label_quantiles_and_skew_for_regression():
    from gkeflow.components.prepare.schema import ColumnSchema, Schema

    schema = Schema("y", [], [ColumnSchema("y", "numeric", "label", False),
                              ColumnSchema("x", "numeric", "feature", False)],
                    task="regression", task_reason="numbers with 5 distinct values")
    sample = pa.table({"y": [1.0, 2.0, 3.0, 4.0, 100.0], "x": [0.0] * 5})
    summary = task_summary(schema, sample)
    assert summary["task"] == "regression" and summary["label_sample"]["rows"] == 5
    assert summary["label_sample"]["quantiles"]["p50"] == 3.0
    assert summary["label_sample"]["skew"] > 1  # one large value: right-skewed


def test_a_requested_task_the_data_would_choose_keeps_the_datas_reason():
    import pyarrow as pa

    from gkeflow.components.prepare.task import decide_task

    words = pa.array(["a", "b", "c"] * 20)
    assert decide_task(words, "classification", "y").reason == "text with 3 distinct values"
    numbers = pa.array([f"{i * 1.37:.2f}" for i in range(60)])
    forced = decide_task(numbers, "classification", "y")
    assert forced.task == "classification" and forced.reason.startswith("asked for (--task")


def test_a_label_mixing_quantities_and_words_is_refused_with_the_counts():
    import pyarrow as pa
    import pytest

    from gkeflow.components.prepare.sources import DataError
    from gkeflow.components.prepare.task import decide_task

    mixed = pa.array([f"{i * 0.37:.2f}" for i in range(70)] + ["n/a", "twelve", "?"] * 10)
    with pytest.raises(DataError) as raised:
        decide_task(mixed, "auto", "y")
    message = str(raised.value)
    # "n/a" reads as missing; "twelve" and "?" are words
    assert "label 'y' mixes numbers (70 rows, 70 distinct) and words (20 rows" in message
    assert "'twelve'" in message and "--task regression" in message
    # asked for, regression takes the numbers and rejects the words
    assert decide_task(mixed, "regression", "y").task == "regression"
    # class codes beside a class name are classes
    codes = pa.array(["1", "2", "3"] * 20 + ["unknown"] * 10)
    assert decide_task(codes, "auto", "y").task == "classification"
