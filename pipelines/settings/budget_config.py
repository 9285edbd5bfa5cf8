"""``budget:`` in gkeflow.yaml: the most one run may cost at list prices, per environment and
per schedule (`gkeflow submit` and `gkeflow schedule apply` refuse a run whose ceiling exceeds
it unless ``--over-budget``; docs/costs.md).

Example::

    budget:
      default: {max_run_usd: 50}     # an environment of parameters: (or default)
      prod: {max_run_usd: 400}
    schedules:
      - name: nightly
        ...
        budget: {max_run_usd: 20}    # wins over its environment's

Imports nothing from gkeflow: the root model in :mod:`gkeflow.pipelines.settings.config`
attaches it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_ENVIRONMENT = "default"


class BudgetSettings(BaseModel):
    """One budget: ``max_run_usd``, the ceiling (USD at list prices) one run may reach."""

    model_config = ConfigDict(extra="forbid")

    max_run_usd: float = Field(gt=0)


def check_budget_environments(config):
    """Every ``budget.<environment>`` is ``default`` or an environment of ``parameters:``."""
    for environment in config.budget:
        if environment != DEFAULT_ENVIRONMENT and environment not in config.parameters:
            known = ", ".join(config.parameters) or "none"
            raise ValueError(f"budget.{environment}: no such environment under parameters "
                             f"(environments: {known})")
    return config


def budget_for(config, environment: str, schedule=None) -> tuple[BudgetSettings | None, str]:
    """The budget a run of ``environment`` (or of ``schedule``) is held to, and its name as
    a message names it; None when there is none."""
    own = getattr(schedule, "budget", None) if schedule is not None else None
    if own is not None:
        return own, f"schedule {schedule.name}'s budget"
    budget = config.budget.get(environment)
    return (budget, f"budget.{environment}") if budget else (None, "")
