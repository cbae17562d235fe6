"""Settings of the judge canary (YAML section `canary`, collector/canary/)."""
from __future__ import annotations

from typing import Annotated, Any

from ctxprec.collector.config_types import Positive, ReadableFile, choice, parse_number, setting
from pydantic import BaseModel, BeforeValidator, ConfigDict

CANARY_MODES = ("auto", "on", "off")
MIN_INTERVAL_S = 5.0


def parse_interval(raw: Any) -> float:
    """Seconds between canary rounds: a number of at least 5 (each round asks the judge for the
    whole set)."""
    value = parse_number(raw)
    if value < MIN_INTERVAL_S:
        raise ValueError(f"must be at least {MIN_INTERVAL_S:g} seconds, got {raw!r}")
    return value


def parse_alarm_rate(raw: Any) -> float:
    value = parse_number(raw)
    if not 0.0 < value < 0.5:
        raise ValueError(f"must be a probability above 0 and below 0.5, got {raw!r}")
    return value


Interval = Annotated[float, BeforeValidator(parse_interval)]
AlarmRate = Annotated[float, BeforeValidator(parse_alarm_rate)]


class CanaryConfig(BaseModel):
    """The judge canary (YAML section `canary`)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    mode: Annotated[str, BeforeValidator(choice(*CANARY_MODES))] = setting(
        "auto", "re-judge the canary set on a schedule and say when the judge changed (auto: on for model judges, "
                "off for the local judge, which cannot change under its name)", flag="--judge-canary-mode",
        choices=CANARY_MODES)
    file: ReadableFile = setting(
        None, "the canary set: JSON lines in the batch event format, each with a `relevant` list (one true/false "
              "per context); unset: the small set shipped with ctxprec", flag="--judge-canary")
    interval_s: Interval = setting(3600.0, "seconds between canary rounds (at least 5); each round asks the judge "
                                           "for every canary sample, counted against the judge budget",
                                   flag="--judge-canary-interval", metavar="SECONDS")
    false_alarm_rate: AlarmRate = setting(
        0.001, "the chance, per round, that an unchanged judge is said to have changed (sets how many canary "
               "verdicts may move beyond the judge's measured run-to-run variation)")
    change_window_s: Positive = setting(
        21600.0, "a precision-drift alarm raised within this many seconds of a judge change (before or after) "
                 "says the judge changed")

    def enabled(self, judge_model: str) -> bool:
        if self.mode == "off":
            return False
        return self.mode == "on" or judge_model.strip().lower() != "local"
