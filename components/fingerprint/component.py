"""KFP shell of the data-fingerprint step."""

from typing import NamedTuple

from kfp import dsl

from gkeflow.components.images import SLIM_IMAGE


@dsl.component(base_image=SLIM_IMAGE, install_kfp_package=False)
def fingerprint_data(
    data_uri: str, bq_query: str = "", bq_filter: str = "", user_module: str = ""
) -> NamedTuple("Fingerprints", [("data", str), ("code", str)]):
    """Fingerprints the content behind a data URI, so that data preparation is cached on
    the data itself rather than on its name; never cached itself.

    Args:
        data_uri: The data preparation's input: local path, directory or glob,
            gs://bucket/path (globs allowed), bq://project.dataset.table or
            embedded://penguins.
        bq_query: For bq:// sources: the SQL query preparation will run, if any.
        bq_filter: For bq:// sources: the row filter preparation will apply, if any.
        user_module: Training's user module (a .py file or module name); empty: built-in.

    Returns:
        data: sha256:<hex> over each source's size, modification time and content hash
            (local), object generation and CRC32C (gs://), or table modification time and
            query (bq://).
        code: sha256:<hex> of the user module's source; empty for the built-in models.
    """
    from collections import namedtuple

    from gkeflow.components.fingerprint.logic import code_fingerprint, fingerprint

    result = fingerprint(data_uri, bq_query=bq_query, bq_filter=bq_filter)
    print(f"data fingerprint ({result.kind}, {len(result.items)} source(s)): {result.value}")
    code = code_fingerprint(user_module)
    if code:
        print(f"user module fingerprint: {code}")
    from gkeflow.components.tracking.more_steps import track_fingerprint

    track_fingerprint(result, code, data_uri)
    return namedtuple("Fingerprints", ["data", "code"])(result.value, code)
