"""Settings of scoring (YAML section `scoring`) and of the judge (YAML section `judge`).

The judge's knobs, their defaults, help, parsers and flags are declared once in the scorer library
(`JudgeConfig`, scorer/config.py); the `judge` section is built from that declaration, adding
only the score scale, so `ctxprec score`, `ctxprec serve` and the library agree on every value."""
from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from ctxprec.collector.config_types import (
    TYPE_OF_PARSER,
    Count,
    NonNegative,
    OptionalPositive,
    OptionalText,
    choice,
    setting,
)
from ctxprec.scorer.config import JudgeConfig, judge_settings
from pydantic import BaseModel, BeforeValidator, ConfigDict, create_model

PROCESS_MODES = ("auto", "on", "off")


class ScoringConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    queue_size: Count = setting(1000, "retrievals waiting for a scoring worker at most; past it new ones are shed "
                                      "as `overloaded`", flag="--queue-size")
    workers: Count = setting(8, "retrievals scored at once", flag="--workers")
    max_rss_mb: OptionalPositive = setting(512.0, "shed new work while the memory held by the sidecar and its scoring "
                                                  "process (resident, less mapped files) is above this, MB (off: no cap)",
                                           flag="--max-rss-mb")
    process: Annotated[str, BeforeValidator(choice(*PROCESS_MODES))] = setting(
        "auto", "judge in a separate scoring process on another core; auto: on for Kafka input with 2+ CPUs",
        flag="--scoring-process", choices=PROCESS_MODES)
    shutdown_timeout_s: NonNegative = setting(10.0, "on SIGTERM, seconds to finish the scoring in flight",
                                              flag="--shutdown-timeout")


def _judge_field(declared: dataclasses.Field[Any]) -> tuple[Any, Any]:
    """A pydantic field of the `judge` section from the library's declaration (scorer/config.py)."""
    parse = declared.metadata["parse"]
    annotation = TYPE_OF_PARSER.get(parse) or Annotated[Any, BeforeValidator(parse)]
    choices = getattr(parse, "choices", None)
    return annotation, setting(declared.default, declared.metadata["help"], flag=declared.metadata["flag"],
                               secret=declared.metadata["secret"], choices=choices,
                               metavar=declared.metadata["metavar"])


class _JudgeSection(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    @property
    def defaulted(self) -> bool:
        """No judge configured: the local judge stands in."""
        return self.model is None  # type: ignore[attr-defined]

    def judge_config(self) -> JudgeConfig:
        values: dict[str, Any] = self.model_dump(exclude={"scale"})
        values["model"] = values["model"] or "local"
        return JudgeConfig(**values)


_FIELDS: dict[str, Any] = {}
for _declared in judge_settings():
    _FIELDS[_declared.name] = _judge_field(_declared)
    if _declared.name == "model":
        # Unset in the sidecar means "no judge configured" (a warning at start); the library says local.
        _FIELDS["model"] = (OptionalText, setting(None, _declared.metadata["help"], flag="--judge-model"))
    if _declared.name == "api_key":
        _FIELDS["scale"] = (NonNegative, setting(1.0, "scores are multiplied by this", flag="--scale"))
# The `judge` YAML section: every knob of the library's JudgeConfig, with the same parsers, plus
# the score scale.
ServeJudgeConfig = create_model("ServeJudgeConfig", __base__=_JudgeSection, **_FIELDS)
