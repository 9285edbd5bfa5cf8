"""KFP shell of the data-preparation step."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Output

from components.images import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def prepare_data(
    data_uri: str,
    label_column: str,
    dataset: Output[Dataset],
    schema: Output[Artifact],
    train_ratio: float = 0.7,
    eval_ratio: float = 0.15,
    test_ratio: float = 0.15,
    max_rejected_fraction: float = 0.1,
):
    """Reads a CSV, infers its schema and splits it deterministically into train/eval/test.

    Rows that cannot be parsed or have no label are kept aside in rejected.csv with
    their reason, never dropped silently.

    Args:
        data_uri: CSV file to read; embedded://penguins is the bundled Palmer Penguins data.
        label_column: Column holding the class to predict.
        dataset: Directory with train.csv, eval.csv, test.csv, rejected.csv and schema.json.
        schema: schema.json: each column's type (numeric/categorical), role and vocabulary.
        train_ratio: Fraction of rows for training.
        eval_ratio: Fraction of rows for validation during training.
        test_ratio: Fraction of rows held out for evaluation.
        max_rejected_fraction: Fail when more than this fraction of rows is rejected.
    """
    import shutil
    from pathlib import Path

    from components.prepare.logic import SCHEMA_FILE, SplitRatios, prepare

    result = prepare(
        source=data_uri,
        output_dir=Path(dataset.path),
        label_column=label_column,
        ratios=SplitRatios(train_ratio, eval_ratio, test_ratio),
        max_rejected_fraction=max_rejected_fraction,
    )
    Path(schema.path).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(dataset.path) / SCHEMA_FILE, schema.path)
    dataset.metadata.update(
        {
            "rows_read": result.rows_read,
            "rejected_rows": result.rejected_rows,
            **{f"{name}_rows": count for name, count in result.split_rows.items()},
        }
    )
    schema.metadata.update(
        {
            "label": result.schema.label,
            "classes": len(result.schema.label_vocabulary),
            "features": len(result.schema.features),
        }
    )
    print(f"rows read {result.rows_read}: {result.split_rows}, rejected {result.rejected_rows}"
          f" {result.rejected_reasons}")
