"""``budget:`` in gkeflow.yaml: the most one run may cost at list prices, per environment and
per schedule, and the most a schedule's runs may cost in a month (`gkeflow submit` and
`gkeflow schedule apply` accept a run whose ceiling fits and refuse one whose ceiling exceeds
it unless ``--over-budget``; `gkeflow plan` shows the verdict; docs/costs.md).

Example::

    budget:
      default: {max_run_usd: 50}     # an environment of parameters: (or default)
      prod: {max_run_usd: 400, max_month_usd: 5000}
    schedules:
      - name: nightly
        ...
        budget: {max_run_usd: 20, max_month_usd: 400}   # wins over its environment's

Imports nothing from gkeflow: the root model in :mod:`gkeflow.pipelines.settings.config`
attaches it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_ENVIRONMENT = "default"


class BudgetSettings(BaseModel):
    """One budget: ``max_run_usd``, the ceiling (USD at list prices) one run may reach, and
    ``max_month_usd``, what a schedule's runs may cost in a month (runs per month from its
    cron x the run's ceiling); at least one of them."""

    model_config = ConfigDict(extra="forbid")

    max_run_usd: float | None = Field(None, gt=0)
    max_month_usd: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one_limit(self):
        if self.max_run_usd is None and self.max_month_usd is None:
            raise ValueError("give max_run_usd (per run), max_month_usd (per month of a "
                             "schedule) or both")
        return self


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
