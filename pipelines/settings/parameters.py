"""Checks of pipeline arguments before any step starts, by the steps' own rules: what
`gkeflow run` checks of its arguments and data, and what `gkeflow submit` and `gkeflow
schedule` check of the merged parameters. Imports only the components' logic."""

from __future__ import annotations


class ParameterError(ValueError):
    """A pipeline argument that cannot work; the message names it and the fix."""


def validate_run_arguments(arguments: dict):
    """ParameterError for the first argument that would make a step fail: the parameters
    (:func:`check_parameters`), and for a local file, the label, key, excluded and feature
    columns against its header, that it holds at least one row, and what the prepare step
    refuses from its sample of rows and from the label's classes or values.

    Returns:
        The task the prepare step will choose and why
        (:class:`~gkeflow.components.prepare.task.TaskChoice`), for local data; else None.
    """
    check_parameters(arguments)
    if arguments.get("backend") == "jax":  # the steps of a local run train here
        import importlib.util

        if importlib.util.find_spec("jax") is None:
            raise ParameterError("backend jax needs jax, which is not installed here: pip "
                                 "install 'gkeflow[jax]', or set backend: tensorflow")
    return _check_columns(arguments)


def check_parameters(arguments: dict) -> None:
    """ParameterError for the first pipeline parameter a step would refuse, checked by the
    steps' own rules before anything runs: split ratios, the training settings (epochs,
    batch size, learning rate, model type), the evaluation policy (``min_accuracy``,
    ``thresholds`` syntax, ``comparison_metric``) and the model name. Parameters a
    pipeline does not have are not checked."""
    from gkeflow.components.prepare.logic import SplitRatios

    try:
        SplitRatios(arguments.get("train_ratio", 0.7), arguments.get("eval_ratio", 0.15),
                    arguments.get("test_ratio", 0.15))
    except ValueError as exc:
        raise ParameterError(f"train_ratio/eval_ratio/test_ratio: {exc}") from None
    _check_training(arguments)
    _check_fractions(arguments)
    if arguments.get("task") == "regression" and arguments.get("metric") == "eval_accuracy":
        raise ParameterError("metric eval_accuracy does not apply to task regression: compare "
                             "the trials on eval_rmse or eval_loss (sweep.metric in "
                             "gkeflow.yaml, or --metric)")
    if "task" in arguments:
        from gkeflow.components.prepare.sources import DataError
        from gkeflow.components.prepare.task import check_task

        try:
            check_task(arguments["task"])
        except DataError as exc:
            raise ParameterError(f"task: {exc}") from None
    _check_policy(arguments)
    if "model_name" in arguments:
        from gkeflow.components.register.local_registry import RegistryError, validate_model_name

        try:
            validate_model_name(arguments["model_name"])
        except RegistryError as exc:
            raise ParameterError(f"model_name: {exc}") from None


def _check_training(arguments: dict) -> None:
    from gkeflow.components.train.logic import TrainParams

    settings = {name: arguments[name] for name in
                ("epochs", "batch_size", "learning_rate", "model_type", "user_module",
                 "early_stopping_patience", "loss", "label_transform", "backend",
                 "gbdt_rounds", "gbdt_learning_rate", "gbdt_max_depth",
                 "gbdt_min_child_weight", "gbdt_subsample", "gbdt_colsample_bytree",
                 "gbdt_reg_lambda", "gbdt_early_stopping_rounds", "candidates")
                if name in arguments}
    if not settings:
        return
    try:
        TrainParams(**settings)
        if settings.get("backend") == "jax":
            from gkeflow.components.train.backend import check_user_module_for_jax

            check_user_module_for_jax(settings.get("user_module", ""))
    except (ValueError, TypeError) as exc:
        raise ParameterError(str(exc)) from None


def _check_fractions(arguments: dict) -> None:
    margin = arguments.get("baseline_margin")
    if margin is not None and not 0.0 <= float(margin) < 1.0:
        raise ParameterError(f"baseline_margin must be in [0, 1): how far below the mean "
                             f"predictor's RMSE a regressor must be (0.05 = 5%); got {margin}")
    for name in ("max_rejected_fraction", "max_missing_fraction"):
        value = arguments.get(name)
        if value is not None and not 0.0 <= float(value) <= 1.0:
            raise ParameterError(f"{name} must be between 0 and 1 (a fraction of rows, "
                                 f"0.3 = 30%); got {value}")


def _check_policy(arguments: dict) -> None:
    """The gate's parameters by the evaluation step's rules for the task: a classifier's,
    a regressor's, or (``auto``, decided from the data later) either."""
    from gkeflow.components.evaluate.policy import (
        BlessingPolicy,
        EvaluationError,
        parse_thresholds,
    )
    from gkeflow.components.evaluate.regression import REGRESSION_METRICS, RegressionPolicy

    task = arguments.get("task", "auto")
    thresholds = arguments.get("thresholds", "")
    metric = arguments.get("comparison_metric", "accuracy")
    tolerance = arguments.get("regression_tolerance", 0.01)
    errors = []
    if task != "regression":
        try:
            BlessingPolicy(arguments.get("min_accuracy", 0.8),
                           tuple(parse_thresholds(thresholds)), metric, tolerance)
            return
        except EvaluationError as exc:
            errors.append(str(exc))
    if task != "classification":
        try:
            if metric not in (*REGRESSION_METRICS, "accuracy"):  # accuracy: the default
                raise EvaluationError(f"unknown comparison_metric {metric!r} for regression; "
                                      f"valid: {', '.join(REGRESSION_METRICS)}")
            RegressionPolicy.from_parameters(thresholds, metric, tolerance,
                                             arguments.get("baseline_margin", 0.05))
            return
        except EvaluationError as exc:
            errors.append(str(exc))
    raise ParameterError(f"{errors[0]} (or, for regression: {errors[1]})" if len(errors) > 1
                         else errors[0])


def _check_columns(arguments: dict):
    from gkeflow.components.prepare.infer import check_column_names
    from gkeflow.components.prepare.sources import DataError, common_header, resolve_sources

    data_uri = str(arguments.get("data_uri", ""))
    if "://" in data_uri and not data_uri.startswith(("file://", "embedded://")):
        return None  # remote data: checked by the step itself
    try:
        header, usable = common_header(resolve_sources(data_uri))
        named_by = usable[0].name
        try:
            check_column_names(header, arguments.get("label_column", ""),
                               arguments.get("key_column", ""),
                               arguments.get("exclude_columns", ""),
                               arguments.get("feature_columns", ""))
        except DataError as exc:
            raise DataError(f"{exc} (the header of {named_by})") from None
        if not _check_rows(usable):
            return None
        rows, choice, distinct = _check_sample(usable, arguments)
        if rows is not None:
            _check_split_sizes(data_uri, rows, distinct, arguments)
        return choice
    except DataError as exc:
        raise ParameterError(str(exc)) from None


#: Below this many expected rows in the smallest split, a split may well come out empty:
#: the data is prepared here, in a temporary folder, to see.
SMALL_SPLIT_ROWS = 50


def _check_split_sizes(data_uri: str, rows: int, distinct: int, arguments: dict
                       ) -> None:
    """DataError when data small enough to be read whole leaves the train or test split
    empty, as the prepare step would split it (by the hash of each row or key, so that
    identical rows share a split: ``distinct`` rows or keys are what is split): training
    would run and evaluation then fail on an empty test split."""
    import tempfile
    from pathlib import Path

    from gkeflow.components.prepare.logic import SplitRatios, prepare
    from gkeflow.components.prepare.sources import DataError, EmptySplit

    ratios = SplitRatios(arguments.get("train_ratio", 0.7), arguments.get("eval_ratio", 0.15),
                         arguments.get("test_ratio", 0.15))
    if distinct * min(ratios.train, ratios.test) >= SMALL_SPLIT_ROWS:
        return
    with tempfile.TemporaryDirectory(prefix="gkeflow-split-check-") as folder:
        try:
            prepare(data_uri, Path(folder) / "dataset", arguments.get("label_column", ""),
                    ratios, max_rejected_fraction=1.0,
                    key_column=arguments.get("key_column", ""),
                    exclude_columns=arguments.get("exclude_columns", ""),
                    feature_columns=arguments.get("feature_columns", ""),
                    task=arguments.get("task", "auto"))
            return
        except EmptySplit as exc:
            counts = exc.split_rows
        except Exception:  # noqa: BLE001 - what the step refuses, it says itself
            return
    empty = [split for split in ("train", "test") if not counts.get(split)]
    shown = ", ".join(f"{split} {counts.get(split, 0)}" for split in ("train", "eval", "test"))
    unit = "key" if arguments.get("key_column") else "row"
    repeated = (f" of which {distinct} distinct {unit}s (identical {unit}s share a split)"
                if distinct < rows else "")
    fix = ("add distinct rows" + ("" if arguments.get("key_column") else
                                  " (or name a column that tells them apart with --key)")
           if repeated else "add rows (a few hundred at least)")
    raise DataError(
        f"data has {rows} rows{repeated}, too few for its splits ({shown} rows, "
        f"by the hash of each {unit}): the "
        f"{' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty; {fix}; "
        "or change --train-ratio/--eval-ratio/--test-ratio")


def _check_sample(sources, arguments: dict):
    """DataError for what the prepare step refuses from its sample of rows (no usable
    feature, a named feature it cannot use, an unreadable label, a label neither task can
    learn) or from the label's classes (fewer than 2 in the whole data), read the way the
    step reads them. Returns the number of rows when the sample holds the whole data (else
    None), the task chosen (None when the sample cannot tell) and the number of distinct
    rows (distinct keys with ``key_column``) in the sample."""
    from gkeflow.components.prepare.logic import SAMPLE_ROWS, fix_schema, sample_rows
    from gkeflow.components.prepare.sources import DataError
    from gkeflow.components.prepare.task import TaskChoice
    from gkeflow.components.prepare.values import label_values

    try:
        header, sample, usable = sample_rows(list(sources), [])
    except DataError:
        return None, None, 0  # every row malformed: left to the step, which shows them
    label = arguments.get("label_column", "")
    _check_encoding(sample, float(arguments.get("max_rejected_fraction", 0.1)),
                    usable[0].name if usable else "the data")
    schema = fix_schema(header, sample, label, None, arguments.get("key_column", ""),
                        arguments.get("exclude_columns", ""),
                        arguments.get("feature_columns", ""),
                        1000, [], arguments.get("task", "auto"))  # 1000: max_vocabulary
    choice = TaskChoice(schema.task, schema.task_reason)
    whole = sample.num_rows if sample.num_rows < SAMPLE_ROWS else None
    distinct = (_distinct_rows(sample, arguments.get("key_column", "")) if whole is not None
                else 0)  # only whole data gets its splits checked
    if schema.regression:
        if arguments.get("label_transform") == "log":
            _check_positive(sample.column(label), label)
        if whole is not None:
            _check_enough_rows(whole, arguments)
        return whole, choice, distinct
    classes = label_values(sample.column(label))
    if len(classes) < 2 and sample.num_rows >= SAMPLE_ROWS:
        for source in usable:  # a rare class may follow the sample: read the label to the end
            for batch in source.batches(lambda *row: None, prefetch=False):
                classes |= label_values(batch.column(label))
                if len(classes) >= 2:
                    return None, choice, distinct
    if len(classes) < 2:
        found = f"one class, {next(iter(classes))!r}" if classes else "no values"
        raise DataError(f"label column {label!r} has {found}; a classifier needs at least 2 "
                        "classes: check --label, or add rows of another class")
    if whole is not None:
        _check_classes_repeat(sample.column(label), label)
        _check_enough_rows(whole, arguments)
    return whole, choice, distinct


def _distinct_rows(sample, key_column: str) -> int:
    """Distinct rows of a sample (distinct values of ``key_column`` when one is named):
    the units the prepare step splits by their hash."""
    frame = sample.select([key_column] if key_column else sample.column_names).to_pandas()
    return int(len(frame.astype(str).drop_duplicates()))


def _check_encoding(sample, max_rejected_fraction: float, name: str) -> None:
    """DataError when more sampled rows hold text that is not UTF-8 than the prepare step
    would reject (``max_rejected_fraction``): a file saved in a legacy encoding, whose every
    such row would be rejected inside prepare-data."""
    import numpy as np
    import pyarrow as pa

    from gkeflow.components.prepare.file_kinds import legacy_encoding_hint
    from gkeflow.components.prepare.sources import DataError
    from gkeflow.components.prepare.values import null_invalid_utf8

    if not sample.num_rows:
        return
    rows = np.zeros(sample.num_rows, dtype=bool)
    example = None
    for column in sample.columns:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        _, bad = null_invalid_utf8(array)
        if bad is not None:
            rows |= bad
            if example is None:
                example = array.view(pa.binary())[int(np.flatnonzero(bad)[0])].as_py()
    if not rows.any() or rows.mean() <= max_rejected_fraction:
        return
    hint = legacy_encoding_hint(example or b"")
    raise DataError(f"{name}: {int(rows.sum())} of the first {sample.num_rows} rows hold text "
                    f"that is not UTF-8{hint}; re-save the file as UTF-8 (every such row "
                    "would be rejected)")


#: The fewest rows the smallest split (train, eval or test) may expect: fewer cannot train,
#: stop early and evaluate on anything.
MIN_SPLIT_ROWS = 3


def minimum_rows(arguments: dict) -> int:
    """The fewest rows data may hold for its splits: :data:`MIN_SPLIT_ROWS` expected in the
    smallest of the train, eval and test splits (20 at 70/15/15)."""
    import math

    ratios = [float(arguments.get(name, default)) for name, default in (
        ("train_ratio", 0.7), ("eval_ratio", 0.15), ("test_ratio", 0.15))]
    smallest = min(r for r in ratios if r > 0)
    return math.ceil(MIN_SPLIT_ROWS / smallest - 1e-9)


def _check_enough_rows(rows: int, arguments: dict) -> None:
    from gkeflow.components.prepare.sources import DataError

    needed = minimum_rows(arguments)
    if rows < needed:
        raise DataError(
            f"data has {rows} rows, too few to train, stop early and evaluate: the splits "
            f"need at least {needed} rows ({MIN_SPLIT_ROWS} expected in the smallest of "
            "train/eval/test); add rows (a few hundred make a useful model)")


def _check_classes_repeat(values, label: str) -> None:
    """DataError when every value of a classification label occurs once: such values are
    no classes to learn (identifiers, or numbers too few to tell)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gkeflow.components.prepare.sources import DataError
    from gkeflow.components.prepare.values import as_strings

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    texts = pc.utf8_trim_whitespace(as_strings(values).drop_null())
    texts = texts.filter(pc.not_equal(texts, ""))
    if len(texts) < 2:
        return
    counts = pc.value_counts(texts).field("counts")
    if pc.max(counts).as_py() == 1:
        raise DataError(
            f"label column {label!r}: each of its {len(texts)} values occurs once, so they "
            "are no classes to learn; a classifier needs each class on at least 2 rows (add "
            "rows), and a number to predict needs more rows and --task regression")


def _check_positive(values, label: str) -> None:
    """DataError when sampled label values reach 0 or below: the train step's log transform
    would refuse them after preparation."""
    from gkeflow.components.prepare.sources import DataError
    from gkeflow.components.prepare.task import label_numbers

    numbers, _ = label_numbers(values)
    if numbers.size and numbers.min() <= 0:
        raise DataError(f"label_transform log needs a positive label, but {label!r} goes "
                        f"down to {numbers.min():g}; use label_transform none")


def _check_rows(sources) -> bool:
    """DataError when none of the (non-empty) input files holds a row below its header
    (reading up to the first row found); False when the rows found are all malformed (left
    to the step, which shows them)."""
    from gkeflow.components.prepare.sources import DataError

    rejected = []
    for source in sources:
        for batch in source.batches(lambda *row: rejected.append(row), prefetch=False):
            if batch.num_rows:
                return True
        if rejected:
            return False
    names = ", ".join(s.name for s in sources[:3]) + (
        f" and {len(sources) - 3} more" if len(sources) > 3 else "")
    raise DataError(f"data has a header but no data rows: {names}; add rows or point "
                    "--data at another file")


def run_families(arguments: dict, configured: tuple[str, ...] | None = None
                 ) -> tuple[str, ...]:
    """The model families a training run with ``arguments`` trains (a task each when
    several): ``model_type`` alone when it names one, else the ``candidates`` argument,
    else ``configured`` (gkeflow.yaml ``candidates:``), else the default set."""
    from gkeflow.components.train.families import trained_families

    candidates = str(arguments.get("candidates") or "")
    if not candidates.strip() and configured:
        candidates = ",".join(configured)
    try:
        return trained_families(str(arguments.get("model_type") or "auto"), candidates,
                                str(arguments.get("user_module") or ""))
    except ValueError as exc:
        raise ParameterError(str(exc)) from None
