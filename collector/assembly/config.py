"""Settings of trace assembly (YAML section `assembly`)."""
from __future__ import annotations

from ctxprec.collector.config_types import Count, NonNegative, Positive, setting
from pydantic import BaseModel, ConfigDict, model_validator


class AssemblyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    quiet_period_s: NonNegative = setting(2.0, "a trace is ready this long after its root span arrived with no "
                                               "more spans, seconds", flag="--quiet-period")
    max_wait_s: NonNegative = setting(30.0, "a trace is ready at most this long after its first span, seconds",
                                      flag="--max-wait")
    max_traces: Count = setting(10_000, "traces being assembled at most; the oldest is handed out early past it",
                                flag="--max-buffered-traces")
    clock_tolerance_s: NonNegative = setting(1.0, "an LLM span that starts up to this long before a retrieval may "
                                                  "still be the one that consumed it (clocks of different hosts); "
                                                  "the trace's structure and the prompt decide first, seconds",
                                             flag="--clock-tolerance")
    max_buffer_mb: Positive = setting(128.0, "bytes of traces being assembled at most, MB", flag="--max-buffer-mb")
    answer_wait_s: NonNegative = setting(
        10.0, "a retrieval with no LLM span that consumed it yet waits this long for one (from its span's arrival, "
              "at most max_wait_s) before it is scored against the query, seconds", flag="--answer-wait")
    late_grace_s: NonNegative = setting(
        60.0, "a trace whose retrievals are all decided is kept this long after its last span, so that a late "
              "retrieval is still decided and a re-sent span recognised (within max_traces and max_buffer_mb), "
              "seconds; 0: its later spans are late", flag="--late-grace")

    @property
    def max_buffer_bytes(self) -> int:
        return int(self.max_buffer_mb * 1024 * 1024)

    @model_validator(mode="after")
    def _wait_covers_quiet(self) -> "AssemblyConfig":
        if self.max_wait_s < self.quiet_period_s:
            raise ValueError(f"[max_wait_s] must be >= assembly.quiet_period_s ({self.quiet_period_s:g}), "
                             f"got {self.max_wait_s:g}")
        return self
