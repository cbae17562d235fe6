"""Settings of the result write-back to an OTLP endpoint (YAML section `export`)."""
from __future__ import annotations

from typing import Annotated

from ctxprec.collector.config_types import (
    OtlpUrl,
    Positive,
    Rate,
    ReadableFile,
    choice,
    setting,
)
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

WRITE_BACK_MODES = ("span", "evaluator")
EVALUATION_LOGS_MODES = ("auto", "on", "off")


class ExportConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    forward_to: OtlpUrl = setting(
        None, "downstream OTLP endpoint: http[s]://host:port (OTLP/HTTP, /v1/traces when no path) or "
              "grpc[s]://host:port; unset: nothing is exported over OTLP", flag="--forward-to")
    write_back: Annotated[str | None, BeforeValidator(choice(*WRITE_BACK_MODES, optional=True))] = setting(
        None, "span: scores on the retrieval spans, forwarding every span (default for OTLP input); evaluator: "
              "new evaluator spans in the same traces (default for Kafka input)",
        flag="--write-back", choices=WRITE_BACK_MODES)
    evaluation_logs: Annotated[str, BeforeValidator(choice(*EVALUATION_LOGS_MODES))] = setting(
        "auto", "evaluator mode: also send a gen_ai.evaluation.result log record per score; auto stops "
                "(one WARNING) when --forward-to does not take OTLP logs", flag="--evaluation-logs",
        choices=EVALUATION_LOGS_MODES)
    threshold: Rate = setting(0.5, "score label is `high` at or above this fraction of the scale, else `low`",
                              flag="--threshold")
    hold_deadline_s: Positive = setting(
        60.0, "span mode: longest a sampled retrieval span waits for its score before it goes on unscored, "
              "seconds", flag="--hold-deadline")
    ca_file: ReadableFile = setting(None, "CA bundle to trust for https:// or grpcs:// --forward-to",
                                    flag="--forward-ca-file")
    cert_file: ReadableFile = setting(None, "client certificate for mTLS to --forward-to", flag="--forward-cert-file")
    key_file: ReadableFile = setting(None, "client key for mTLS to --forward-to", flag="--forward-key-file")
    max_queue_mb: Positive = setting(
        64.0, "data queued for --forward-to at most, MB; beyond it new data is dropped and counted",
        flag="--forward-max-queue-mb")

    @property
    def max_queue_bytes(self) -> int:
        return max(1, int(self.max_queue_mb * 1024 * 1024))

    @model_validator(mode="after")
    def _client_files_go_together(self) -> "ExportConfig":
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("[cert_file / key_file] give both or neither")
        return self
