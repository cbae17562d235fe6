"""Settings of how far to trust the judge (YAML section `judging`): where human labels come from,
how many recent verdicts are kept to match them against, and the agreement alert's threshold
(docs/JUDGES.md, "How far to trust the judge")."""
from __future__ import annotations

from ctxprec.collector.config_types import Count, OptionalPositive, Positive, ReadableFile, setting
from ctxprec.collector.judging.agreement import DEFAULT_KAPPA_ALERT
from pydantic import BaseModel, ConfigDict, field_validator

DEFAULT_VERDICT_STORE = 10_000
DEFAULT_MAX_WAITING = 10_000
DEFAULT_WAIT_S = 900.0


class JudgingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    labels_file: ReadableFile = setting(
        None, "a JSONL file of human labels ({trace_id, span_id, relevant}), read at start and again whenever it "
              "changes; the same lines POST /labels takes", flag="--labels-file")
    verdict_store_size: Count = setting(
        DEFAULT_VERDICT_STORE, "scored retrievals whose verdicts are kept to match human labels against (the most "
                               "recent; a label for an older one is counted as evicted)", flag="--verdict-store-size")
    max_waiting_labels: Count = setting(
        DEFAULT_MAX_WAITING, "labels kept waiting for verdicts not known yet (more are counted as overflow)",
        flag="--labels-max-waiting")
    labels_wait_s: Positive = setting(
        DEFAULT_WAIT_S, "how long a label waits for its retrieval's verdicts before it is counted as expired",
        flag="--labels-wait-s")
    labels_phoenix_interval_s: OptionalPositive = setting(
        300.0, "with --sink phoenix=URL: every this many seconds, read people's annotations (annotator kind HUMAN) "
               "on the recently scored spans back from that Phoenix as labels; off: never",
        flag="--labels-phoenix-interval")
    kappa_alert: float = setting(
        DEFAULT_KAPPA_ALERT, "the judge is not trusted when the upper end of kappa's 95 percent interval is under this, "
                             "with at least 50 labelled contexts (ctxprec_judge_kappa_alert_threshold, read by the "
                             "alert CtxprecJudgeDisagrees)", flag="--judge-kappa-alert")

    @field_validator("kappa_alert", mode="before")
    @classmethod
    def _kappa(cls, raw: object) -> float:
        try:
            value = float(str(raw).strip()) if not isinstance(raw, (int, float)) else float(raw)
        except ValueError:
            raise ValueError(f"must be a number between -1 and 1, got {raw!r}") from None
        if not -1.0 <= value <= 1.0:
            raise ValueError(f"must be between -1 and 1, got {raw!r}")
        return value
