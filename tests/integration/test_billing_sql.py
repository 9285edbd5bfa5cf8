"""The billing queries are GoogleSQL over the export's schema (sqlglot's BigQuery parser),
and the check refuses what BigQuery would."""

import pytest

from gkeflow.pipelines.targets import billing
from tests.integration.billing_sql import SqlError, check_sql

TABLE = "my-project.billing.gcp_billing_export_resource_v1_0123AB_4567CD_89EF01"


@pytest.mark.parametrize("query", [billing.QUERY, billing.FRESHNESS_QUERY])
def test_the_queries_parse_and_read_only_export_columns(query):
    check_sql(query.format(table=TABLE))


@pytest.mark.parametrize("broken, message", [
    (("SELECT\n", "SELEC\n"), "Syntax error"),
    (("e.sku.description", "e.sku.descr"), "Field name descr does not exist in sku"),
    (("l.value FROM", "l.valu FROM"), "Field name valu does not exist in labels"),
    (("SUM(e.cost)", "SUM(e.costs)"), "Unrecognized name: e.costs"),
    (("UNNEST(e.credits)", "UNNEST(e.sku)"), "not a repeated export column"),
    (("AND e.usage_start_time", "AND usage_start_time"), "Unrecognized name: usage_start_time"),
])
def test_the_check_refuses_what_bigquery_would(broken, message):
    old, new = broken
    assert old in billing.QUERY
    with pytest.raises(SqlError, match=message):
        check_sql(billing.QUERY.replace(old, new, 1).format(table=TABLE))


def test_the_export_kind_is_read_from_the_table_name():
    assert billing.export_kind(TABLE) == "detailed"
    assert billing.export_kind("p.d.gcp_billing_export_v1_0123AB") == "standard"
    assert billing.export_kind("p.d.my_view") == "unknown"
    assert "only in the detailed" in billing.check_export("p.d.my_view", "gke")
    assert billing.check_export("p.d.my_view", "vertex") == ""
    with pytest.raises(billing.BillingError, match="standard usage cost export"):
        billing.check_export("p.d.gcp_billing_export_v1_0123AB", "gke")
