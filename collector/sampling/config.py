"""Settings of sampling and budgets (YAML section `sampling`)."""
from __future__ import annotations

import fnmatch
from typing import Any, Mapping

from ctxprec.collector.config_types import OptionalPositive, Positive, Rate, setting
from pydantic import BaseModel, ConfigDict, Field, field_validator


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise ValueError("must map attribute keys to plain values")
    return str(value)


class SamplingRule(BaseModel):
    """Applies `rate` to retrievals whose service matches `service` (a glob; None = any) and whose
    attributes equal every `attributes` entry (values compared as strings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: Rate = Field(description="fraction of the matching retrievals scored")
    service: str | None = Field(None, description="service name or glob (e.g. checkout-*)", min_length=1)
    attributes: dict[str, str] = Field(default_factory=dict, description="span attributes that must all be equal")

    @field_validator("attributes", mode="before")
    @classmethod
    def _plain_values(cls, raw: Any) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            raise ValueError("must map attribute keys to plain values")
        return {str(key): _plain(value) for key, value in raw.items()}

    def matches_service(self, service: str) -> bool:
        return self.service is None or fnmatch.fnmatchcase(service, self.service)

    def matches(self, service: str, attributes: Mapping[str, Any]) -> bool:
        if not self.matches_service(service):
            return False
        for key, expected in self.attributes.items():
            if key not in attributes or str(attributes[key]) != expected:
                return False
        return True


class SamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    default_rate: Rate = setting(1.0, "fraction of traces scored when no rule matches (by trace id: every "
                                      "replica and restart agrees)", flag="--sample-rate")
    rules: list[SamplingRule] = setting([], "rules by service and span attributes, first match wins: a list of "
                                            "{rate, service, attributes} (YAML only)")
    max_scores_per_minute: OptionalPositive = setting(None, "throttle: scores per minute at most (off: none)",
                                                      flag="--max-scores-per-minute")
    daily_budget_usd: OptionalPositive = setting(None, "judge spend per UTC day at most, USD (off: none)",
                                                 flag="--daily-budget-usd")
    duplicate_window_s: Positive = setting(600.0, "a retrieval seen again within this many seconds is decided "
                                                  "`duplicate`")
