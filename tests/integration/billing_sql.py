"""The Cloud Billing export's schema, and a GoogleSQL check of the queries gkeflow sends it:
parsed by sqlglot's BigQuery dialect (a syntax error fails), every column and struct field
resolved against the schema (an unknown name fails)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

#: The detailed usage cost export's columns (cloud.google.com/billing/docs/how-to/
#: export-data-bigquery-tables/detailed-usage): struct and repeated-record fields by name.
#: The standard export has the same but ``resource`` and ``price``.
EXPORT_SCHEMA: dict[str, set[str] | None] = {
    "billing_account_id": None, "service": {"id", "description"},
    "sku": {"id", "description"}, "usage_start_time": None, "usage_end_time": None,
    "project": {"id", "number", "name", "labels", "ancestry_numbers", "ancestors"},
    "labels": {"key", "value"}, "system_labels": {"key", "value"},
    "location": {"location", "country", "region", "zone"}, "resource": {"name", "global_name"},
    "export_time": None, "cost": None, "currency": None, "currency_conversion_rate": None,
    "usage": {"amount", "unit", "amount_in_pricing_units", "pricing_unit"},
    "credits": {"name", "amount", "full_name", "id", "type"},
    "invoice": {"month", "publisher_type"}, "cost_type": None,
    "adjustment_info": {"id", "description", "mode", "type"},
    "price": {"effective_price", "tier_start_amount", "unit", "pricing_unit_quantity"},
    "cost_at_list": None, "transaction_type": None, "seller_name": None, "tags": None,
    # ingestion-time partitioning's pseudo-columns
    "_PARTITIONTIME": None, "_PARTITIONDATE": None,
}
REPEATED = ("labels", "system_labels", "credits")


class SqlError(ValueError):
    """The query is not GoogleSQL, or names what the export does not have."""


def check_sql(sql: str) -> None:
    """Raise :class:`SqlError` unless ``sql`` parses as GoogleSQL and every column it reads
    exists: ``e.<column>[.<field>]`` for the export aliased ``e``, and ``<alias>.<field>``
    for an ``UNNEST(e.<repeated>) AS <alias>``."""
    try:
        tree = sqlglot.parse_one(sql, read="bigquery")
    except sqlglot.errors.ParseError as exc:
        raise SqlError(f"Syntax error: {str(exc).splitlines()[0]}") from None
    unnested = {}
    for unnest in tree.find_all(exp.Unnest):
        source, table_alias = unnest.expressions[0], unnest.args.get("alias")
        # BigQuery's `UNNEST(x) AS l` names the element: sqlglot keeps it as the alias column
        alias = table_alias and (table_alias.name or (
            table_alias.columns[0].name if table_alias.columns else ""))
        if not isinstance(source, exp.Column) or source.table != "e" \
                or source.name not in REPEATED or not alias:
            raise SqlError(f"UNNEST of {source.sql('bigquery')}: not a repeated export column")
        unnested[alias] = source.name
    outputs = {select.alias_or_name for select in tree.find_all(exp.Select)
               for select in select.expressions}
    for column in tree.find_all(exp.Column):
        parts = [part.name for part in column.parts]
        if len(parts) == 1 and parts[0] in outputs:
            continue  # GROUP BY / ORDER BY an output name
        head, *rest = parts
        if head == "e":
            if not rest or rest[0] not in EXPORT_SCHEMA:
                raise SqlError(f"Unrecognized name: {'.'.join(parts)}")
            fields = EXPORT_SCHEMA[rest[0]]
            if rest[1:] and (fields is None or rest[0] in REPEATED or rest[1] not in fields):
                raise SqlError(f"Field name {rest[1]} does not exist in {rest[0]}")
        elif head in unnested:
            if len(rest) != 1 or rest[0] not in EXPORT_SCHEMA[unnested[head]]:
                raise SqlError(f"Field name {'.'.join(rest)} does not exist in "
                               f"{unnested[head]}")
        else:
            raise SqlError(f"Unrecognized name: {'.'.join(parts)}")
