"""Settings of the shadow judge (YAML section `shadow`, collector/shadow/)."""
from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from ctxprec.collector.config_types import Count, OptionalPositive, OptionalText, Rate, setting
from ctxprec.scorer.config import JudgeConfig, parse_api_base, parse_api_key
from pydantic import BaseModel, BeforeValidator, ConfigDict


class ShadowConfig(BaseModel):
    """The shadow judge (YAML section `shadow`): off unless a model is given."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    model: OptionalText = setting(
        None, "a candidate judge model (as --judge-model) that judges a share of the scored retrievals beside the "
              "live judge; its verdicts are compared with the live ones, never published as scores",
        flag="--shadow-judge-model")
    api_base: Annotated[str | None, BeforeValidator(parse_api_base)] = setting(
        None, "the shadow judge's endpoint (as --judge-api-base)", flag="--shadow-judge-api-base", metavar="URL")
    api_key: Annotated[str | None, BeforeValidator(parse_api_key)] = setting(
        None, "the shadow judge's API key (as --judge-api-key)", flag="--shadow-judge-api-key", secret=True)
    share: Rate = setting(0.1, "share of the scored retrievals the shadow judge judges too",
                                flag="--shadow-sample-rate")
    max_in_flight: Count = setting(
        2, "retrievals the shadow judge judges at once, its own budget of requests: a sample offered while it is "
           "full is skipped (counted), never queued behind or in front of live scoring",
        flag="--shadow-max-in-flight")
    daily_budget_usd: OptionalPositive = setting(
        None, "USD per UTC day the shadow judge may spend (off: no cap); past it samples are skipped (counted)",
        flag="--shadow-daily-budget-usd")

    @property
    def enabled(self) -> bool:
        return bool(self.model)

    def judge_config(self, live: JudgeConfig) -> JudgeConfig:
        """The live judge's settings with the shadow's model, endpoint and key; its own verdict
        cache (never the shared one: a shadow verdict must not answer for the live judge), the
        template reason (no extra calls) and its own request limit."""
        values: dict[str, Any] = {"model": self.model or "", "api_base": self.api_base, "api_key": self.api_key,
                                  "cache_url": None, "reason_mode": "template", "price_per_mtok": None,
                                  "concurrency": self.max_in_flight}
        return dataclasses.replace(live, **values)
