"""Settings of sampling and budgets (YAML section `sampling`)."""
from __future__ import annotations

import fnmatch
from typing import Any, Mapping

from ctxprec.collector.config_types import Count, OptionalPositive, Positive, Rate, Switch, setting
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
    # Adaptive sampling (sampling/adaptive.py, docs/STATISTICS.md); `AdaptiveSettings` takes its
    # defaults from here.
    adaptive: Switch = setting(False, "adaptive sampling: a service's rate rises while its drift statistic is "
                                      "past the warning level, until the drift is confirmed or gone (on|off)",
                               flag="--adaptive-sampling")
    adaptive_warning: Rate = setting(0.2, "adaptive sampling: the drift statistic, as a fraction of the alarm "
                                          "threshold, that starts a boost (between 0 and 1)")
    adaptive_factor: Positive = setting(20.0, "adaptive sampling: a boosted service's rates are multiplied by this",
                                        flag="--adaptive-factor")
    adaptive_max_rate: Rate = setting(1.0, "adaptive sampling: a boost never takes a rate above this",
                                      flag="--adaptive-max-rate")
    adaptive_confirm_scores: Count = setting(16, "adaptive sampling: scores the alarm must hold before the rate "
                                                 "returns to base (the drift is confirmed)")
    adaptive_max_boost_s: Positive = setting(300.0, "adaptive sampling: a boost that neither alarms nor falls back "
                                                    "ends after this many seconds")

    @field_validator("adaptive_warning")
    @classmethod
    def _inside(cls, value: float) -> float:
        if not 0.0 < value < 1.0:
            raise ValueError(f"must be between 0 and 1 (a fraction of the alarm threshold), got {value!r}")
        return value

    @field_validator("adaptive_factor")
    @classmethod
    def _at_least_one(cls, value: float) -> float:
        if value < 1.0:
            raise ValueError(f"must be >= 1, got {value!r}")
        return value

    @field_validator("adaptive_max_rate")
    @classmethod
    def _above_zero(cls, value: float) -> float:
        if value <= 0.0:
            raise ValueError(f"must be > 0, got {value!r}")
        return value
