"""Settings of the result write-back (YAML section `export`): to an OTLP endpoint, and to the
result sinks that write scores into a backend's own store (Phoenix annotations, Langfuse scores)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Mapping
from urllib.parse import urlsplit

from ctxprec.collector.config_types import (
    Count,
    OtlpUrl,
    Positive,
    Rate,
    ReadableFile,
    choice,
    setting,
)
from ctxprec.collector.exporters.headers import Headers, parse_forward_headers
from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

WRITE_BACK_MODES = ("span", "evaluator")
EVALUATION_LOGS_MODES = ("auto", "on", "off")
SINK_KINDS = ("phoenix", "langfuse")


@dataclass(frozen=True, slots=True)
class SinkTarget:
    """One result sink: which backend, and its base URL."""

    kind: str  # one of SINK_KINDS
    url: str

    def __str__(self) -> str:
        return f"{self.kind}={self.url}"


def parse_sinks(raw: Any) -> tuple[SinkTarget, ...]:
    """`KIND=URL` items: a list (YAML; an item may also be a one-key mapping `{phoenix: URL}`), or
    text with items separated by commas or spaces (a `CTXPREC_SINK` variable)."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [part for part in re.split(r"[,\s]+", raw) if part]
    elif isinstance(raw, Mapping):
        raw = [raw]
    targets: list[SinkTarget] = []
    for item in raw:
        if isinstance(item, SinkTarget):
            target = item
        elif isinstance(item, Mapping) and len(item) == 1:
            (kind, url), = item.items()
            target = _target(str(kind), str(url))
        elif isinstance(item, str):
            kind, sep, url = item.partition("=")
            if not sep:
                raise ValueError(f"must be KIND=URL with KIND one of {', '.join(SINK_KINDS)}, got {item!r}")
            target = _target(kind, url)
        else:
            raise ValueError(f"each sink must be KIND=URL, got {item!r}")
        if target in targets:
            raise ValueError(f"sink {target} is given twice")
        targets.append(target)
    return tuple(targets)


def _target(kind: str, url: str) -> SinkTarget:
    kind, url = kind.strip().lower(), url.strip()
    if kind not in SINK_KINDS:
        raise ValueError(f"unknown sink {kind!r}; one of {', '.join(SINK_KINDS)}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{kind}: must be an http:// or https:// URL, got {url!r}")
    if parts.username or parts.password:
        # Keys come from the backend's own variables; a URL is printed in logs and --help.
        raise ValueError(f"{kind}: put no credentials in the URL (the key is read from "
                         f"{'PHOENIX_API_KEY' if kind == 'phoenix' else 'LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY'})")
    return SinkTarget(kind, url.rstrip("/"))


SinkTargets = Annotated[tuple[SinkTarget, ...], BeforeValidator(parse_sinks)]
ForwardHeaders = Annotated[Headers, BeforeValidator(parse_forward_headers)]


class ExportConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)

    forward_to: OtlpUrl = setting(
        None, "downstream OTLP endpoint: http[s]://host:port (OTLP/HTTP, /v1/traces, /v1/logs and /v1/metrics when "
              "no path) or grpc[s]://host:port; spans, scores and the app's logs and metrics go there; unset: nothing "
              "is exported over OTLP (logs and metrics received are counted as dropped)", flag="--forward-to")
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
        64.0, "data held for --forward-to at most (queued and being sent), MB; when it is full the oldest is "
              "dropped and counted", flag="--forward-max-queue-mb")
    queue_deadline_s: Positive = setting(
        300.0, "longest data waits for --forward-to through an outage, seconds; then it is dropped and counted "
               "(attempts go on meanwhile, at most 5 s apart)", flag="--forward-queue-deadline")
    forward_headers: ForwardHeaders = setting(
        (), "header NAME=VALUE on every OTLP export (span forwarding, evaluator spans and logs); repeat for "
            "several; $VAR or ${VAR} in VALUE is read from the environment, VALUE @FILE from a file; added to "
            "OTEL_EXPORTER_OTLP_HEADERS, winning for the same name; values are never logged",
        flag="--forward-header", secret=True, repeatable=True, metavar="NAME=VALUE")
    sinks: SinkTargets = setting(
        (), "result sink KIND=URL writing each score into a backend's own store: phoenix=http://host:6006 "
            "(span and document annotations, key from PHOENIX_API_KEY) or langfuse=https://host (scores, keys "
            "from LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY); repeat for several",
        flag="--sink", repeatable=True, metavar="KIND=URL")
    sink_deadline_s: Positive = setting(
        120.0, "longest a score waits to reach a result sink (backend down, span not in the backend yet), "
               "seconds; then it is dropped and counted", flag="--sink-deadline")
    sink_max_queue: Count = setting(
        10000, "scores waiting per result sink at most; beyond it new scores are dropped and counted",
        flag="--sink-max-queue")

    @property
    def max_queue_bytes(self) -> int:
        return max(1, int(self.max_queue_mb * 1024 * 1024))

    @model_validator(mode="after")
    def _client_files_go_together(self) -> "ExportConfig":
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("[cert_file / key_file] give both or neither")
        return self
