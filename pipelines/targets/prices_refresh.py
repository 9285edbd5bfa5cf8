"""``gkeflow prices refresh``: read SKUs from the Cloud Billing Catalog API into the cache.

One ``list_skus`` call per page (``next_page_token``), each through :func:`transport.call`:
429 and 5xx answers are retried with backoff, a bounded number of times. A 403 because the
API is not enabled, or missing credentials, end in one line naming the fix. The refreshed
rows go to :data:`prices.CACHE_FILE` beside gkeflow.yaml; :mod:`sku_prices` maps Compute
Engine's SKUs, :mod:`price_vertex` Vertex AI's, :mod:`price_autopilot` GKE Autopilot's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

from gkeflow.pipelines.compute import price_autopilot, price_vertex, prices, sku_prices
from gkeflow.pipelines.targets.transport import RetryPolicy, call

ENDPOINT = "cloudbilling.googleapis.com"
ENABLE_FIX = "run `gcloud services enable cloudbilling.googleapis.com` in your project"
PAGE_SIZE = 5000
POLICY = RetryPolicy()


class PricesRefreshError(RuntimeError):
    """The refresh cannot go on; the message names the fix."""


def make_client(api_endpoint: str = ""):
    """A REST CloudCatalogClient; a plain-http loopback endpoint (an emulator) needs no
    credentials, anything else uses Application Default Credentials."""
    from urllib.parse import urlsplit

    from google.cloud import billing_v1

    endpoint = api_endpoint or ENDPOINT
    parts = urlsplit(endpoint)
    if parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1"):
        from google.auth.credentials import AnonymousCredentials

        credentials = AnonymousCredentials()
    else:
        from gkeflow.pipelines.targets.credentials import google_credentials

        credentials = google_credentials("gkeflow prices refresh")
    return billing_v1.CloudCatalogClient(
        transport="rest", credentials=credentials, client_options={"api_endpoint": endpoint})


def _page(client, service: str, currency: str, token: str, policy: RetryPolicy):
    from google.api_core import exceptions as gexc
    from google.cloud import billing_v1

    request = billing_v1.ListSkusRequest(parent=f"services/{service}", currency_code=currency,
                                         page_token=token, page_size=PAGE_SIZE)

    def one() -> billing_v1.ListSkusResponse:
        try:
            pager = client.list_skus(request=request, retry=None, timeout=policy.timeout_s)
        except (gexc.PermissionDenied, gexc.Forbidden) as exc:
            if exc.reason == "SERVICE_DISABLED" or "has not been used" in str(exc) \
                    or "is disabled" in str(exc):
                raise PricesRefreshError(
                    f"the Cloud Billing API is not enabled: {ENABLE_FIX}") from None
            raise
        except (gexc.Unauthenticated, gexc.Unauthorized):
            from gkeflow.pipelines.targets.credentials import ADC_FIX

            raise PricesRefreshError(f"the Cloud Billing API refused the credentials: "
                                     f"{ADC_FIX}") from None
        return next(iter(pager.pages))

    return call(f"listing the SKUs of services/{service}", one, policy)


def _unit_price(sku) -> float | None:
    if not sku.pricing_info:
        return None
    rates = sku.pricing_info[0].pricing_expression.tiered_rates
    if not rates:
        return None
    money = rates[-1].unit_price
    return money.units + money.nanos / 1e9


def list_skus(client, service: str, currency: str = "USD", policy: RetryPolicy = POLICY,
              progress: Callable[[str], None] = lambda _: None) -> Iterator[sku_prices.Sku]:
    """Every SKU of ``service`` with a price, page by page."""
    token, page_number, count = "", 0, 0
    while True:
        page = _page(client, service, currency, token, policy)
        page_number += 1
        for sku in page.skus:
            price = _unit_price(sku)
            if price is None:
                continue
            expression = sku.pricing_info[0].pricing_expression
            money = expression.tiered_rates[-1].unit_price
            count += 1
            yield sku_prices.Sku(sku.sku_id, sku.description, sku.category.usage_type,
                                 sku.category.resource_group, tuple(sku.service_regions),
                                 expression.usage_unit, price, money.currency_code or currency)
        progress(f"services/{service}: page {page_number}, {count} priced SKUs so far")
        token = page.next_page_token
        if not token:
            return


def refresh(client, directory: Path, currency: str = "USD", today: date | None = None,
            policy: RetryPolicy = POLICY,
            progress: Callable[[str], None] = lambda _: None) -> sku_prices.Refresh:
    """Read the Compute Engine, Vertex AI and Kubernetes Engine (Autopilot) SKUs, map them
    onto the vendored catalogue, write the cache under ``directory``; returns what was
    refreshed and what stayed as it was."""
    today = today or date.today()
    ce_skus, vertex_skus = (list(list_skus(client, service, currency, policy, progress))
                            for service in (sku_prices.COMPUTE_ENGINE, sku_prices.VERTEX_AI))
    others = sorted({sku.currency for sku in ce_skus + vertex_skus} - {currency})
    if others:
        raise PricesRefreshError(f"the API answered in {', '.join(others)}, not {currency}; "
                                 "check --currency")
    result = price_vertex.map_all(ce_skus, vertex_skus, prices.load_prices(), today,
                                  currency=currency)
    autopilot = price_autopilot.map_autopilot(
        list_skus(client, price_autopilot.KUBERNETES_ENGINE, currency, policy, progress),
        today, currency)
    read = {row.key for row in autopilot.rows}
    result.rows += autopilot.rows
    result.unmatched = [row for row in result.unmatched if row.key not in read]
    result.autopilot = autopilot
    path = prices.cache_path(directory)
    prices.write_prices(path, result.rows, f"Prices read from the {sku_prices.SOURCE} on "
                        f"{today.isoformat()} ({currency}); refreshed by `gkeflow prices "
                        "refresh`. Rows not here come from the vendored catalogue.")
    return result
